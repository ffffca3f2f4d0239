#!/usr/bin/env bash
# llama-cpp-python for the virtual environment, compiled from source once per version and build flags.
#
#   scripts/llama_cpp.sh install PYTHON VERSION FLAGS
#       build (or reuse) the wheel for FLAGS and install it
#   scripts/llama_cpp.sh check PYTHON VERSION FLAGS [FALLBACK_FLAGS]
#       run the default LM on the installed build; if that fails and FALLBACK_FLAGS are given,
#       install the build for FALLBACK_FLAGS instead and check that one
#
# Wheels are kept under ~/.cache/s2s/wheels/llama-cpp-python-VERSION-HASH (HASH of the flags): pip's own
# cache would hand back a wheel built with other flags. FLAGS are CMake arguments (CMAKE_ARGS).
set -euo pipefail

command=$1 python=$2 version=$3 flags=$4 fallback=${5:-}

wheels() {
  printf '%s/.cache/s2s/wheels/llama-cpp-python-%s-%s' "$HOME" "$version" \
    "$(printf '%s' "$1" | md5sum | cut -c1-12)"
}

install() {
  local dir
  dir=$(wheels "$1")
  if ! ls "$dir"/*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $version with CMAKE_ARGS=\"$1\" (a few minutes, once)"
    CMAKE_ARGS="$1" "$python" -m pip wheel --quiet --no-cache-dir --no-deps --wheel-dir "$dir" \
      "llama-cpp-python==$version"
  fi
  "$python" -m pip install --quiet --force-reinstall --no-deps --no-index --find-links "$dir" \
    "llama-cpp-python==$version"
}

# The default LM evaluates a prompt and decodes a token: the code paths a build for the wrong CPU dies in
# ("Illegal instruction" kills the process, so this runs in its own).
runs() {
  "$python" - <<'EOF'
import llama_cpp

from pipelines.backends.llama_cpp_lm import default_model_path

lm = llama_cpp.Llama(model_path=default_model_path(), n_ctx=512, n_threads=1, verbose=False)
lm.eval(lm.tokenize(b"The build runs on this machine: " * 8))
lm.eval([lm.sample(temp=0.0)])
EOF
}

case $command in
  install)
    install "$flags"
    ;;
  check)
    if runs; then
      echo "llama-cpp-python $version (CMAKE_ARGS=\"$flags\") runs the default LM on this machine"
    elif [ -n "$fallback" ] && [ "$fallback" != "$flags" ]; then
      echo "llama-cpp-python built with CMAKE_ARGS=\"$flags\" does not run here; falling back to \"$fallback\"" >&2
      install "$fallback"
      runs
      echo "llama-cpp-python $version (CMAKE_ARGS=\"$fallback\") runs the default LM on this machine"
    else
      echo "llama-cpp-python built with CMAKE_ARGS=\"$flags\" does not run the default LM here" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 install|check PYTHON VERSION FLAGS [FALLBACK_FLAGS]" >&2
    exit 2
    ;;
esac
