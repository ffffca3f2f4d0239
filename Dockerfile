# syntax=docker/dockerfile:1
# The speech-to-speech server's image: the server (`serve`), the Celery worker (`worker`) or any manage.py command.
# It runs offline: the default models are installed from their packages at build time and checked by a warm-up
# turn. docs/deploy.md#containers says how to build, run and scale it; compose.yaml starts the whole stack.
#
#   docker build -t s2s .                          # the CPU image: requirements.txt, no PyTorch, no CUDA library
#   docker build -t s2s:gpu --build-arg VARIANT=gpu .   # and requirements-torch.txt: PyTorch with CUDA, Coqui TTS
#
# Build arguments:
#   BASE_IMAGE        a Debian bookworm image with Python 3.11 (scripts/container_base.sh makes one from Debian's packages)
#   VARIANT           cpu (default) or gpu
#   LLAMA_CMAKE_ARGS  llama.cpp's build flags; the default is the Makefile's AVX2 build (LLAMA_AVX2), which runs on any
#                     x86-64 CPU of the last ten years, never -march=native (the image runs on other machines than the
#                     one that built it). -DGGML_CUDA=on needs the CUDA toolkit in BASE_IMAGE.
#   TORCH_INDEX_URL   CPU image only: an index with CPU builds of requirements-torch.txt's torch and torchaudio (PyTorch's
#                     own, .../whl/cpu), installed with the rest of that file but its CUDA libraries, for Coqui TTS and the
#                     transformers LM on the CPU; empty (default): no PyTorch at all.
# Build secrets (for machines whose pip needs them; never kept in a layer):
#   pip_ca    a CA bundle for pip (a TLS-inspecting proxy); pip_conf   a pip.conf (an index mirror)

ARG BASE_IMAGE=python:3.11-slim-bookworm

# --- llama-cpp-python's pin, alone: the compile below stays cached while other pins change --------------------------
FROM ${BASE_IMAGE} AS pins
COPY requirements.txt /src/requirements.txt
RUN sed -n 's/^llama-cpp-python==//p' /src/requirements.txt > /llama-version

# --- llama-cpp-python, compiled once into a wheel -----------------------------------------------------------------
FROM ${BASE_IMAGE} AS llama
ARG LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
RUN apt-get update && apt-get install -y --no-install-recommends g++ make cmake ninja-build \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/build
COPY scripts/pip_secrets.sh /src/scripts/pip_secrets.sh
COPY --from=pins /llama-version /src/llama-version
# The wheel as scripts/llama_cpp.sh builds it (pip wheel with CMAKE_ARGS), into /wheels.
RUN --mount=type=secret,id=pip_ca --mount=type=secret,id=pip_conf \
    . /src/scripts/pip_secrets.sh \
    && CMAKE_ARGS="$LLAMA_CMAKE_ARGS" /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels \
       "llama-cpp-python==$(cat /src/llama-version)"

# --- the runtime ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS runtime
ARG VARIANT=cpu
ARG TORCH_INDEX_URL=
# libgomp1: llama.cpp's OpenMP threads. Everything else the engines need comes inside their wheels.
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin s2s \
    && mkdir -p /data/media && chown -R s2s:s2s /data
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY requirements.txt requirements-torch.txt requirements-models.txt /app/
COPY scripts/pip_secrets.sh /app/scripts/pip_secrets.sh
# The lock files pin every package, so they install with --no-deps exactly as pinned, as `make` stacks them: the
# CPU image takes requirements.txt (the defaults run on llama.cpp, CTranslate2 and ONNX Runtime: no PyTorch, no CUDA
# library), the GPU image requirements-torch.txt on top; neither takes the suite's requirements-test.txt.
RUN --mount=type=secret,id=pip_ca --mount=type=secret,id=pip_conf \
    . /app/scripts/pip_secrets.sh \
    && python3 -m venv /opt/venv \
    && grep -v -i '^llama-cpp-python==' /app/requirements.txt > /tmp/requirements.txt \
    && case "$VARIANT" in \
         cpu) if [ -n "$TORCH_INDEX_URL" ]; then \
                grep -v -i -E '^(torch|torchaudio|torchcodec|triton|nvidia-[a-z0-9-]+|cuda-[a-z-]+)==' \
                  /app/requirements-torch.txt >> /tmp/requirements.txt; \
              fi ;; \
         gpu) cat /app/requirements-torch.txt >> /tmp/requirements.txt ;; \
         *) echo "VARIANT is cpu or gpu, not $VARIANT" >&2; exit 2 ;; \
       esac \
    && pip install --no-cache-dir --no-deps -r /tmp/requirements.txt \
    && if [ "$VARIANT" = cpu ] && [ -n "$TORCH_INDEX_URL" ]; then \
         pip install --no-cache-dir --no-deps --index-url "$TORCH_INDEX_URL" \
           $(grep -E '^(torch|torchaudio)==' /app/requirements-torch.txt); \
       fi \
    && pip install --no-cache-dir --no-deps -r /app/requirements-models.txt \
    && rm /tmp/requirements.txt
# What the pins lack on this Python (scripts/pip_missing.py: backports for an older 3.11 than requirements.txt's).
COPY scripts/pip_missing.py /app/scripts/pip_missing.py
RUN --mount=type=secret,id=pip_ca --mount=type=secret,id=pip_conf \
    . /app/scripts/pip_secrets.sh \
    && for round in 1 2 3; do \
         missing=$(python /app/scripts/pip_missing.py /app/requirements-models.txt); \
         [ -z "$missing" ] && break; \
         echo "installing what the pins lack on this Python: $missing"; \
         pip install --no-cache-dir --no-deps $missing; \
       done
COPY --from=llama /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-deps /tmp/wheels/llama_cpp_python-*.whl && rm -rf /tmp/wheels
COPY manage.py pyproject.toml /app/
COPY s2s_project /app/s2s_project
COPY realtime /app/realtime
COPY pipelines /app/pipelines
COPY templates /app/templates
COPY static /app/static
COPY scripts /app/scripts
WORKDIR /app
RUN python manage.py collectstatic --noinput --verbosity 0
ENV S2S_MEDIA_ROOT=/data/media DATABASE_URL=sqlite:////data/db.sqlite3
# Offline, and the build's check proves it: a model that reached for a hub would fail here, not at a customer's.
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
USER s2s
# The check: every default model loads from its package (the chunked ones joined into ~/.cache/s2s/models and
# checked by SHA-256, here, once) and one spoken turn runs through a unit; the LM's build runs on this CPU.
RUN python manage.py warmup_pool --size 1
EXPOSE 8000
STOPSIGNAL SIGTERM
# Ready or busy: /readyz's 503 for a full pool is a node at work, not a sick one (an orchestrator that replaces
# unhealthy containers must not kill it); warming, draining and no answer are unhealthy. Load balancers read
# /readyz itself. Podman keeps HEALTHCHECK only in the docker image format (podman build --format docker).
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s --retries=3 CMD ["python", "/app/scripts/container_health.py"]
ENTRYPOINT ["/app/scripts/container_entrypoint.sh"]
CMD ["serve"]
