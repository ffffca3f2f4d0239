"""An evaluation on llama.cpp that can be stopped part-way: reading ahead's chunks end within milliseconds once
the answer comes or a step due sooner waits for a core, rather than at the end of the chunk."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pipelines import cpu

from ._llama_adapter import forget_from

# Between the steps of an evaluation llama.cpp asks its abort callback, ``bool (*)(void *data)``, whether to stop.
# The C library's strlen, given a two-byte buffer, is such a callback that runs no Python: 0 (go on) until the
# first byte is set, then 1 (stop). A Python callback would take the GIL at every step, on llama.cpp's thread.
STOP_POLL_S = 0.005


@functools.cache
def _abort_callbacks() -> tuple[Any, Any]:
    """(strlen as llama.cpp's abort callback, no callback): made once, and kept while llama.cpp may call it."""
    import llama_cpp

    strlen = ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value
    return llama_cpp.ggml_abort_callback(strlen), llama_cpp.ggml_abort_callback(0)


@contextlib.contextmanager
def interruptible(context: Any, stop: Callable[[], bool]) -> Iterator[Callable[[list[int], bool], bool]]:
    """Evaluations of ``context`` that end within milliseconds once ``stop()`` says so, or, where the batch
    is to give way, once a step due sooner waits for a core (``cpu.CoreShare.wanted_before``), not at the end
    of the batch. The function yielded, ``evaluate(tokens, give_way)``, says whether all were read; where it
    was stopped the context holds what it held before. A thread looks every ``STOP_POLL_S``. For reading ahead,
    whose batches may then be long."""
    import llama_cpp

    stopping, none = _abort_callbacks()
    flag = ctypes.create_string_buffer(2)
    share, due = cpu.current(), cpu.urgency()
    giving_way = threading.Event()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(STOP_POLL_S):
            if stop() or (giving_way.is_set() and share.wanted_before(due())):
                flag[0] = b"x"

    def evaluate(tokens: list[int], give_way: bool) -> bool:
        if give_way:
            giving_way.set()
        else:
            giving_way.clear()
        flag[0] = b"\0"
        try:
            context.eval(tokens)
        except RuntimeError:
            if flag[0] == b"\0":
                raise  # not stopped: a failure of its own
            forget_from(context, context.n_tokens)  # llama.cpp drops the stopped batch too
            return False
        return True

    llama_cpp.llama_set_abort_callback(context.ctx, stopping, ctypes.cast(flag, ctypes.c_void_p))
    watcher = threading.Thread(target=watch, name="read-ahead-stop", daemon=True)
    watcher.start()
    try:
        yield evaluate
    finally:
        done.set()
        watcher.join()
        llama_cpp.llama_set_abort_callback(context.ctx, none, None)
