"""The process's core share (pipelines.cpu): an LM step takes every core only while nothing else computes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines import cpu
from pipelines.cpu import CoreShare

READ_THE_MACHINE = cpu.runnable_elsewhere


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """No other thread waits for a core unless a test says so."""
    monkeypatch.setattr(cpu, "runnable_elsewhere", lambda: 0)


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
    monkeypatch.setattr(cpu, "runnable_elsewhere", lambda: 1)
    with share.busy():
        assert share.lm_threads() == 1


def test_every_core_that_measured_slower_is_left_alone_for_a_while(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(cpu.time, "monotonic", lambda: clock[0])
    share = CoreShare(cores=2, share=1)
    with share.busy():
        share.observe(1, 0.100)
        share.observe(2, 0.060)
        assert share.lm_threads() == 2
        share.observe(2, 0.450)  # a core taken: two threads stall at llama.cpp's barrier
        assert share.lm_threads() == 1
        clock[0] += cpu.RETRY_S + 0.1
        assert share.lm_threads() == 2  # tried again
        share.observe(2, 0.450)  # still slower, soon after: left alone twice as long
        clock[0] += cpu.RETRY_S + 0.1
        assert share.lm_threads() == 1
        clock[0] += cpu.RETRY_S
        assert share.lm_threads() == 2


def test_a_fixed_share_never_adapts():
    for share in (CoreShare(cores=2, share=2), CoreShare(cores=2, share=1, adaptive=False)):
        with share.busy():
            assert share.lm_threads() == share.share
        share.observe(share.cores, 5.0)  # a slow step on every core changes nothing either
        with share.busy():
            assert share.lm_threads() == share.share


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
    share = cpu.configure(share=1)
    monkeypatch.setattr(share, "cores", 2)
    monkeypatch.setattr(share, "adaptive", True)
    seen: list[int] = []
    real = share.lm_threads
    monkeypatch.setattr(share, "lm_threads", lambda: seen.append(real()) or seen[-1])
    measured: list[int] = []  # the thread counts of the steps measured (``observe``)
    observe = share.observe
    monkeypatch.setattr(
        share, "observe", lambda threads, seconds: measured.append(threads) or observe(threads, seconds)
    )
    try:
        with share.busy():
            assert "".join(lm.generate_stream(question, 12, 0.0))
        assert set(seen) == {2}
        assert set(measured) == {2}
        seen.clear()
        with share.busy(), share.busy():  # the TTS at work beside it
            assert "".join(lm.generate_stream(question, 12, 0.0))
        assert set(seen) == {1}
        import llama_cpp

        for context in lm.contexts.free:  # each context back on its own count after a generation on two
            assert llama_cpp.llama_n_threads(context.ctx) == 1
            assert llama_cpp.llama_n_threads_batch(context.ctx) == 1
    finally:
        cpu.configure(share=1, adaptive=False)


def queued(share: CoreShare, count: int, timeout: float = 10) -> None:
    """Waits until ``count`` steps wait for a core."""
    deadline = time.monotonic() + timeout
    while len(share._waiting) < count:
        assert time.monotonic() < deadline, f"{len(share._waiting)} steps waiting, expected {count}"
        time.sleep(0.005)


def test_steps_run_one_per_core_and_a_free_core_goes_to_the_step_due_soonest():
    share = CoreShare(cores=2, share=1, ordered=True)
    order: list[str] = []
    hold = threading.Event()
    running = threading.Semaphore(0)
    lock = threading.Lock()
    most_at_once = [0, 0]  # now, most

    def step(name: str, due: float, holds: bool = False) -> None:
        with cpu.serving(lambda: due), share.core():
            with lock:
                order.append(name)
                most_at_once[0] += 1
                most_at_once[1] = max(most_at_once)
            running.release()
            if holds:
                hold.wait(timeout=10)
            with lock:
                most_at_once[0] -= 1

    first = [threading.Thread(target=step, args=(name, 0.0, True)) for name in ("a", "b")]
    for thread in first:
        thread.start()
    for _ in first:
        assert running.acquire(timeout=10)
    later = []
    for name, due in (("late", 30.0), ("soonest", 10.0), ("soon", 20.0)):
        later.append(threading.Thread(target=step, args=(name, due)))
        later[-1].start()
        queued(share, len(later))
    assert order == ["a", "b"]  # every core taken: the three wait
    hold.set()
    for thread in first + later:
        thread.join(timeout=10)
    assert order[2:] == ["soonest", "soon", "late"]
    assert most_at_once[1] == 2
    assert share.steps_waited == 3


def test_a_long_step_is_told_to_give_way_only_to_a_waiting_step_due_before_it():
    """``wanted_before``: what reading ahead's watcher asks (``_llama_abort.interruptible``) while its chunk holds
    the only core: another step waiting, due sooner, is a reason to stop part-way; one due later is not."""
    share = CoreShare(cores=1, share=1, ordered=True)

    def waiting(due: float) -> threading.Thread:
        def step() -> None:
            with cpu.serving(lambda: due), share.core():
                pass

        thread = threading.Thread(target=step)
        thread.start()
        return thread

    with cpu.serving(lambda: 20.0), share.core():
        assert cpu.urgency()() == 20.0
        assert not share.wanted_before(20.0)  # nobody waits
        later = waiting(30.0)
        queued(share, 1)
        assert not share.wanted_before(20.0)
        sooner = waiting(10.0)
        queued(share, 2)
        assert share.wanted_before(20.0)
    for thread in (later, sooner):
        thread.join(timeout=10)
    assert not CoreShare(cores=1, share=1).wanted_before(float("inf"))  # without the order nobody waits


def test_a_step_inside_another_of_the_same_thread_runs_at_once():
    share = CoreShare(cores=1, share=1, ordered=True)
    with share.core(), share.core() as waited:
        assert waited == 0.0
    with share.core():  # and the core came free again
        pass


def test_without_the_order_steps_never_wait():
    share = CoreShare(cores=1, share=1)
    waited: list[float] = []

    def other() -> None:
        with share.core() as seconds:
            waited.append(seconds)

    with share.core():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=5)
    assert waited == [0.0]


def test_stepwise_computes_each_item_on_a_core_and_closes_what_it_was_given():
    share = cpu.configure(share=1, ordered=True)
    seen: list[int] = []
    closed = []

    def items():
        try:
            for i in range(3):
                seen.append(share._running)
                yield i
        finally:
            closed.append(True)

    try:
        steps = cpu.stepwise(items())
        assert next(steps) == 0
        assert share._running == 0  # no core held between items
        steps.close()
        assert closed == [True] and seen == [1]
    finally:
        cpu.configure(share=1, adaptive=False)


def test_the_first_words_of_an_answer_are_due_before_the_rest_of_one_playing_and_reading_ahead_comes_last():
    from pipelines import audio
    from pipelines.messages import AudioOut, ResponseStarted, TextForSpeech, UserWordsSoFar
    from pipelines.stages.base import SessionContext
    from pipelines.timeline import Timeline

    def speech(timeline: Timeline) -> TextForSpeech:
        return TextForSpeech(
            generation=1, response_id="resp_a", text="Blue.", voice="alloy", output_format=audio.PCM, timeline=timeline
        )

    now = time.monotonic()
    playing, new = SessionContext(), SessionContext()
    playing.reset(1)
    new.reset(1)
    earlier = Timeline(speech_end_at=now - 2.0)  # a turn whose answer started playing
    rest_of_playing = playing.urgency(speech(earlier))
    assert rest_of_playing() == now - 2.0  # nothing sent yet: due when its speech ended
    playing.admit(
        ResponseStarted(
            generation=1,
            response_id="resp_a",
            item_id="i",
            output_modalities=("audio",),
            output_format=audio.PCM,
            voice="alloy",
            out_of_band=False,
        )
    )
    earlier.mark("emitted")
    playing.admit(AudioOut(generation=1, response_id="resp_a", data=bytes(2 * 24000 * 3)))  # 3 s of audio
    first_words = new.urgency(speech(Timeline(speech_end_at=now - 0.3)))
    assert first_words() == now - 0.3
    assert first_words() < rest_of_playing() <= now + 3.0 - cpu.PLAYING_RESERVE_S + 0.5
    reading_ahead = new.urgency(UserWordsSoFar(generation=1, item_id="i", text="what is"))
    assert reading_ahead() > rest_of_playing()
    new.turn_ending.set()  # the turn ended while the LM's thread still reads ahead: the answer waits for it
    assert reading_ahead() < first_words()


def test_the_rest_of_an_answer_is_due_after_other_answers_first_words_until_its_audio_goes_out():
    from pipelines import audio
    from pipelines.messages import TextForSpeech, UserTurn
    from pipelines.stages.base import SessionContext
    from pipelines.timeline import Timeline

    context = SessionContext()
    context.reset(1)
    timeline = Timeline(speech_end_at=100.0)
    lm = context.urgency(UserTurn(generation=1, item_id="i", text="Hi", create_response=True, timeline=timeline))
    piece = TextForSpeech(
        generation=1, response_id="r", text="Hello there.", voice="alloy", output_format=audio.PCM, timeline=timeline
    )
    tts = context.urgency(piece)
    assert lm() == tts() == 100.0
    timeline.mark("lm_first_piece")  # the LM's part of the way to the first audio is done; the TTS's is not
    assert lm() == 100.0 + cpu.NEXT_PIECE_S
    assert tts() == 100.0
    timeline.mark("tts_first_audio")
    assert tts() == 100.0 + cpu.NEXT_PIECE_S


def test_a_core_just_left_stays_with_its_more_urgent_owner_for_a_moment():
    """An answer's next token comes a moment after its last: a transcription due later does not take the core
    in between (it would hold the answer up for its whole length), but takes it once the answer stops."""
    share = CoreShare(cores=1, share=1, ordered=True)
    answer, other = object(), object()
    order: list[str] = []

    def transcription() -> None:
        with cpu.serving(lambda: 10.0, owner=other), share.core():
            order.append("transcription")

    with cpu.serving(lambda: 0.0, owner=answer):
        with share.core():
            waiting = threading.Thread(target=transcription)
            waiting.start()
            queued(share, 1)
        for token in range(3):
            time.sleep(cpu.HOLD_S / 5)  # the token goes on its way
            with share.core():
                order.append(f"token {token}")
    left = time.monotonic()
    waiting.join(timeout=10)
    assert order == ["token 0", "token 1", "token 2", "transcription"]
    assert time.monotonic() - left < 1.0
