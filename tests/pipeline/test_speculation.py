"""Speculative turns: work starts before the silence window closes; its output waits for the window.

Built from the loopback profile's FAKE engines (pipelines/loopback.py: a loud
frame is speech, the transcript says how long the turn was, the LM answers
"You said: ...") around the real VAD, STT, LM and TTS stages.
"""

from __future__ import annotations

import threading
import time

import pytest

from pipelines import audio
from pipelines.loopback import loopback_engines
from pipelines.messages import (
    AudioIn,
    Outbound,
    ResponseFinished,
    ResponseStarted,
    SpeechStarted,
    SpeechStopped,
    TranscriptCompleted,
)
from pipelines.stages.base import SessionContext
from pipelines.stages.lm import LmStage
from pipelines.stages.stt import SttStage
from pipelines.stages.tts import TtsStage
from pipelines.stages.vad import VadStage
from pipelines.timeline import spans
from pipelines.unit import PipelineUnit
from tests.support.speech import silence, tone


class Collector:
    def __init__(self) -> None:
        self.outputs: list[Outbound] = []
        self.finished = threading.Event()

    def __call__(self, out: Outbound) -> None:
        self.outputs.append(out)
        if isinstance(out, ResponseFinished):
            self.finished.set()

    def of(self, kind: type) -> list[Outbound]:
        return [o for o in self.outputs if isinstance(o, kind)]


@pytest.fixture
def unit():
    def stages(context: SessionContext):
        vad, stt, lm, tts = loopback_engines(context)
        return [
            VadStage(context, vad, partial_every_ms=0, speculate_after_ms=64, min_interrupt_ms=0),
            SttStage(context, stt),
            LmStage(context, lm),
            TtsStage(context, {"alloy": tts}),
        ]

    unit = PipelineUnit(0, stages)
    unit.start(timeout=10)
    yield unit
    unit.stop()


def feed(unit: PipelineUnit, generation: int, *pieces) -> None:
    import numpy as np

    data = audio.encode(np.concatenate(pieces), audio.PCM)
    for at in range(0, len(data), 960):
        unit.submit(AudioIn(generation=generation, data=data[at : at + 960], audio_format=audio.PCM))


def lm_history(unit: PipelineUnit) -> list[tuple[str, str]]:
    lm = next(stage for stage in unit.stages() if isinstance(stage, LmStage))
    return [(item.role, item.text) for item in lm.history.values()]


def test_a_speculative_turn_is_held_until_the_silence_window_closes(unit):
    sink = Collector()
    generation = unit.begin(sink, "sess_a")
    feed(unit, generation, silence(0.3), tone(0.6), silence(0.8))
    assert sink.finished.wait(10)
    kinds = [type(o).__name__ for o in sink.outputs]
    assert kinds.index("SpeechStopped") < kinds.index("TranscriptCompleted") < kinds.index("ResponseStarted")
    assert len(sink.of(TranscriptCompleted)) == 1 and len(sink.of(ResponseStarted)) == 1
    item_id = sink.of(SpeechStarted)[0].item_id
    assert unit.context.turn_confirmed(f"{item_id}#1")  # the answer was started speculatively, then confirmed


def test_speech_after_the_speculation_point_drops_the_work_and_the_turn_goes_on(unit):
    sink = Collector()
    generation = unit.begin(sink, "sess_b")
    # 0.6 s of speech, a pause longer than the speculation point but shorter than the window, more speech.
    feed(unit, generation, silence(0.3), tone(0.6), silence(0.25), tone(0.6), silence(0.8))
    assert sink.finished.wait(10)
    assert len(sink.of(SpeechStarted)) == 1 and len(sink.of(SpeechStopped)) == 1
    transcripts = sink.of(TranscriptCompleted)
    assert len(transcripts) == 1 and len(sink.of(ResponseStarted)) == 1
    seconds = float(transcripts[0].transcript.split()[2])
    assert seconds > 1.2  # the whole turn, both stretches of speech, not the abandoned first half
    item_id = sink.of(SpeechStarted)[0].item_id
    assert unit.context.turn_abandoned(f"{item_id}#1") and unit.context.turn_confirmed(f"{item_id}#2")
    # The conversation holds the final turn and its answer only, not the abandoned attempt.
    history = lm_history(unit)
    assert [role for role, _ in history] == ["user", "assistant"]
    assert history[0][1] == transcripts[0].transcript


def test_a_speculative_turn_reports_where_its_time_went_from_the_end_of_speech_to_the_release(unit):
    sink = Collector()
    generation = unit.begin(sink, "sess_c")
    feed(unit, generation, silence(0.3), tone(0.6), silence(0.8))
    assert sink.finished.wait(10)
    marks = sink.of(ResponseFinished)[0].timeline.breakdown()  # read as the answer went out: the decision is in it
    reached = [name for name, _, _ in spans(marks)]
    # The work ran ahead of the decision; its first audio left the unit only once the turn was over.
    assert reached.index("speculation") < reached.index("stt_start") < reached.index("stt_end")
    assert reached.index("stt_end") < reached.index("lm_start") < reached.index("lm_first_piece")
    assert reached.index("lm_first_piece") < reached.index("tts_start") < reached.index("tts_first_audio")
    assert reached[-1] == "emitted" and "decision" in reached
    assert 0 < marks["speculation"] < marks["decision"] <= marks["emitted"]
    assert sum(span for _, span, _ in spans(marks)) == pytest.approx(marks["emitted"])
    stopped = sink.of(SpeechStopped)[0]
    assert marks["speech_end_at"] == stopped.speech_end_at


def test_an_answer_ready_before_the_decision_reports_its_wait_for_it(unit):
    """The speculative answer is done while the window is still open: held, then released at the decision.
    Its breakdown, read once it goes out (as the session's recorder reads it), has the decision and the release;
    the one taken when the TTS finished could not (the wait showed as the session's send)."""
    sink = Collector()
    generation = unit.begin(sink, "sess_d")
    feed(unit, generation, silence(0.3), tone(0.6), silence(0.2))  # past the speculation point, window open
    time.sleep(1.5)  # the FAKE answer is done meanwhile, and held
    assert not sink.of(ResponseFinished)
    feed(unit, generation, silence(0.5))
    assert sink.finished.wait(10)
    finished = sink.of(ResponseFinished)[0]
    assert "decision" not in finished.breakdown and "tts_first_audio" in finished.breakdown
    marks = finished.timeline.breakdown()
    assert marks["tts_first_audio"] < marks["decision"] <= marks["emitted"]
    assert [name for name, _, _ in spans(marks)][-2:] == ["decision", "emitted"]


def test_no_partial_transcript_is_sent_while_the_last_one_is_still_with_the_stt():
    import numpy as np

    from pipelines.loopback import FakeEnergyVad
    from pipelines.messages import PartialUtterance

    context = SessionContext()
    vad = VadStage(context, FakeEnergyVad(), partial_every_ms=64, speculate_after_ms=0, min_interrupt_ms=0)
    vad.setup()
    data = audio.encode(np.concatenate([silence(0.1), tone(1.0)]), audio.PCM)

    def partials(seconds: float) -> int:
        out = []
        for at in range(0, int(len(data) * seconds), 960):
            out += vad.process(AudioIn(generation=0, data=data[at : at + 960], audio_format=audio.PCM))
        return sum(isinstance(o, PartialUtterance) for o in out)

    assert partials(0.6) == 1  # the first is sent; the STT has not taken it yet, so no other follows
    assert context.partial_pending.is_set()
    context.partial_pending.clear()  # the STT is done with it
    assert partials(0.3) == 1


class SlowPartials:
    """A FAKE transcriber: a partial transcript (under a second of audio) takes until it is let go."""

    def __init__(self) -> None:
        self.started, self.let_go = threading.Event(), threading.Event()

    def transcribe(self, samples, language=None, prompt=None) -> str:
        if samples.size < audio.PIPELINE_RATE:
            self.started.set()
            assert self.let_go.wait(10)
            return "What is the"
        return "What is the capital of France?"


def test_the_final_transcript_does_not_wait_for_a_partial_one_still_being_made():
    import queue

    import numpy as np

    from pipelines.messages import PartialHeard, PartialUtterance, UserTurn, UserWordsSoFar, Utterance

    context = SessionContext()
    context.reset(1)
    transcriber = SlowPartials()
    stt = SttStage(context, transcriber)
    handed_back: queue.Queue = queue.Queue()
    stt.later = handed_back.put  # as the unit wires it: the stage's own inbox
    second = np.zeros(audio.PIPELINE_RATE, np.float32)

    def partial(item_id: str) -> PartialUtterance:
        context.partial_pending.set()  # as the VAD sends one
        return PartialUtterance(generation=1, item_id=item_id, samples=second[:8000].tobytes())

    assert list(stt.process(partial("item_1"))) == []  # set aside: the stage's thread is free at once
    assert transcriber.started.wait(5)
    final = Utterance(generation=1, item_id="item_1", samples=np.tile(second, 2).tobytes(), create_response=True)
    (turn,) = [m for m in stt.process(final) if isinstance(m, UserTurn)]
    assert turn.text == "What is the capital of France?" and not transcriber.let_go.is_set()
    transcriber.let_go.set()
    late = handed_back.get(timeout=5)
    assert isinstance(late, PartialHeard) and late.text == "What is the"
    assert list(stt.process(late)) == []  # the turn's final transcript is out: its late partial says nothing
    assert not context.partial_pending.is_set()  # and the VAD may send the next turn's partials
    list(stt.process(partial("item_2")))
    ahead = [m for m in stt.process(handed_back.get(timeout=5)) if isinstance(m, UserWordsSoFar)]
    assert [(m.item_id, m.text) for m in ahead] == [("item_2", "What is")]
    stt.cleanup()


@pytest.mark.parametrize(("detection", "after_ms"), [("server_vad", 96), ("semantic_vad", 32)])
def test_semantic_vad_sends_the_turn_ahead_sooner_than_server_vad(detection, after_ms):
    """semantic_vad may end the turn after 200 ms of silence: its words and its answer are wanted by then."""
    from dataclasses import replace

    import numpy as np

    from pipelines.config import SessionSettings, TurnDetection
    from pipelines.loopback import FakeEnergyVad
    from pipelines.messages import Utterance

    context = SessionContext()
    context.settings = replace(SessionSettings(), turn_detection=TurnDetection(type=detection))
    vad = VadStage(
        context,
        FakeEnergyVad(),
        partial_every_ms=0,
        speculate_after_ms=96,
        semantic_speculate_after_ms=32,
        min_interrupt_ms=0,
    )
    vad.setup()
    data = audio.encode(np.concatenate([silence(0.1), tone(0.5), silence(0.15)]), audio.PCM)
    sent_at = []
    for at in range(0, len(data), 960):
        out = vad.process(AudioIn(generation=0, data=data[at : at + 960], audio_format=audio.PCM))
        if any(isinstance(m, Utterance) and m.turn for m in out):
            sent_at.append(vad._silence_ms)
    assert sent_at == [after_ms]


def test_no_partial_transcript_is_sent_while_every_core_computes(monkeypatch):
    """Other sessions' answers take every core: a partial (and the LM's reading ahead of it) waits for a free one."""
    import contextlib

    import numpy as np

    from pipelines import cpu
    from pipelines.loopback import FakeEnergyVad
    from pipelines.messages import PartialUtterance

    share = cpu.CoreShare(cores=2, adaptive=False)
    monkeypatch.setattr(cpu, "_current", share)
    context = SessionContext()
    vad = VadStage(context, FakeEnergyVad(), partial_every_ms=64, speculate_after_ms=0, min_interrupt_ms=0)
    vad.setup()
    data = audio.encode(np.concatenate([silence(0.1), tone(2.0)]), audio.PCM)
    chunks = iter(range(0, len(data), 960))

    def partials(seconds: float) -> int:
        out = []
        for _, at in zip(range(int(seconds * 25)), chunks):
            out += vad.process(AudioIn(generation=0, data=data[at : at + 960], audio_format=audio.PCM))
        return sum(isinstance(o, PartialUtterance) for o in out)

    with contextlib.ExitStack() as answers:
        answers.enter_context(share.busy())
        answers.enter_context(share.busy())  # two answers computing on two cores
        assert partials(0.6) == 0
        answers.close()
        assert partials(0.1) == 1  # the next frame after a core is free
