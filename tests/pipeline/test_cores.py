"""The process's core share (pipelines.cores): an LM step takes every core only while nothing else computes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines import cores
from pipelines.cores import CoreShare

READ_THE_MACHINE = cores.runnable_elsewhere


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """No other thread waits for a core unless a test says so."""
    monkeypatch.setattr(cores, "runnable_elsewhere", lambda: 0)


def test_every_core_while_the_lm_works_alone_the_share_beside_another_stage():
    share = CoreShare(cores=2, share=1)
    with share.busy():
        assert share.lm_threads() == 2
        with share.busy():  # the TTS starts on the first words
            assert share.lm_threads() == 1
        assert share.lm_threads() == 2
    assert share.working == 0


def test_another_process_waiting_for_a_core_keeps_the_share(monkeypatch):
    share = CoreShare(cores=2, share=1)
    monkeypatch.setattr(cores, "runnable_elsewhere", lambda: 1)
    with share.busy():
        assert share.lm_threads() == 1


def test_every_core_that_measured_slower_is_left_alone_for_a_while(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(cores.time, "monotonic", lambda: clock[0])
    share = CoreShare(cores=2, share=1)
    with share.busy():
        share.observe(1, 0.100)
        share.observe(2, 0.060)
        assert share.lm_threads() == 2
        share.observe(2, 0.450)  # a core taken: two threads stall at llama.cpp's barrier
        assert share.lm_threads() == 1
        clock[0] += cores.RETRY_S + 0.1
        assert share.lm_threads() == 2  # tried again
        share.observe(2, 0.450)  # still slower, soon after: left alone twice as long
        clock[0] += cores.RETRY_S + 0.1
        assert share.lm_threads() == 1
        clock[0] += cores.RETRY_S
        assert share.lm_threads() == 2


def test_a_fixed_share_never_adapts():
    for share in (CoreShare(cores=2, share=2), CoreShare(cores=2, share=1, adaptive=False)):
        with share.busy():
            assert share.lm_threads() == share.share
        share.observe(share.cores, 5.0)
        assert share.step_seconds() == {}


def test_busy_counts_across_threads():
    share = CoreShare(cores=4, share=1)
    started, release = threading.Barrier(4), threading.Event()

    def work() -> None:
        with share.busy():
            started.wait(timeout=10)
            release.wait(timeout=10)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    started.wait(timeout=10)
    assert share.working == 3
    release.set()
    for thread in threads:
        thread.join(timeout=10)
    assert share.working == 0


def test_runnable_elsewhere_reads_the_machine():
    """Linux's count of runnable threads, less the caller: a process spinning beside it counts."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        seen = [READ_THE_MACHINE() for _ in range(200)]
    finally:
        spinner.kill()
        spinner.wait(timeout=10)
    assert all(n >= 0 for n in seen)
    assert max(seen) >= 1


def test_a_lone_llama_cpp_generation_takes_every_core_and_gives_them_back(monkeypatch):
    """Real llama.cpp (the packaged SmolLM2-135M) on a share of one thread: alone, its steps run on two
    and are measured there; beside another stage they run on the share; the context keeps its own count."""
    from pipelines.backends.llama_cpp_lm import LlamaCppLM
    from pipelines.backends.transformers_lm import default_model

    folder, name = default_model()
    lm = LlamaCppLM(str(Path(folder) / name), threads=1, n_ctx=512)
    question = [{"role": "user", "content": "Name three colours."}]
    share = cores.configure(share=1)
    monkeypatch.setattr(share, "cores", 2)
    monkeypatch.setattr(share, "adaptive", True)
    seen: list[int] = []
    real = share.lm_threads
    monkeypatch.setattr(share, "lm_threads", lambda: seen.append(real()) or seen[-1])
    try:
        with share.busy():
            assert "".join(lm.generate_stream(question, 12, 0.0))
        assert set(seen) == {2}
        assert set(share.step_seconds()) == {2}
        seen.clear()
        with share.busy(), share.busy():  # the TTS at work beside it
            assert "".join(lm.generate_stream(question, 12, 0.0))
        assert set(seen) == {1}
        import llama_cpp

        for context in lm._free:  # each context back on its own count after a generation on two
            assert llama_cpp.llama_n_threads(context._ctx.ctx) == 1
            assert llama_cpp.llama_n_threads_batch(context._ctx.ctx) == 1
    finally:
        cores.configure(share=1, adaptive=False)
