# Sourced by the Dockerfile's pip steps: the build secrets pip_ca (a CA bundle) and pip_conf (a pip.conf), where the
# build was given them (podman/docker build --secret id=pip_ca,src=...). Mounted for that one step, never in a layer.
if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi
if [ -s /run/secrets/pip_conf ]; then export PIP_CONFIG_FILE=/run/secrets/pip_conf; fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-120}
