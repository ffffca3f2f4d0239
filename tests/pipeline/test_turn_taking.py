"""Turn taking on real speech: the VAD stage with the real Silero VAD and the real Smart Turn model.

Piper speaks the user's side without its random variation, so every run hears the same
audio, as from a recording; a mid-sentence pause is one synthesis cut at a word boundary
(tests/support/speech.py ``spoken_halves``), so the first half keeps the pitch of a
sentence that goes on.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from pipelines import audio
from pipelines.backends.faster_whisper_stt import WhisperEngine
from pipelines.backends.silero import SileroVadModel
from pipelines.backends.smart_turn import SmartTurnModel
from pipelines.backends.turn_text import EndOfTurnLM
from pipelines.config import EngineConfig, PoolConfig, SessionSettings, TurnDetection
from pipelines.messages import (
    AudioIn,
    Message,
    ResponseFinished,
    ResponseStarted,
    SpeechStarted,
    SpeechStopped,
    TurnConfirmed,
    Utterance,
)
from pipelines.stages.base import SessionContext
from pipelines.stages.vad import VadStage
from tests.pipeline.conftest import Turn, collect, connect, speak
from tests.support.server import LiveServer
from tests.support.speech import pcm16_chunks, silence, spoken, spoken_halves

pytestmark = pytest.mark.real_models


@pytest.fixture(scope="module")
def real_server(tmp_path_factory) -> Iterator[LiveServer]:
    """The real default models, with room for a story that is still being written when it is interrupted
    seconds later (llama.cpp writes the usual 96 tokens in about two seconds on two cores)."""
    server = LiveServer(
        tmp_path_factory.mktemp("real"),
        env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "2", "S2S_LM_MAX_NEW_TOKENS": "512"},
    )
    server.start(ready_timeout=900)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def models() -> tuple[SileroVadModel, SmartTurnModel]:
    return SileroVadModel(), SmartTurnModel()


def vad_stage(models, detection: TurnDetection, min_interrupt_ms: int = 0) -> VadStage:
    context = SessionContext()
    context.settings = replace(SessionSettings(), turn_detection=detection)
    stage = VadStage(
        context,
        models[0],
        partial_every_ms=0,
        speculate_after_ms=0,
        turn_model=models[1],
        check_after_ms=DEFAULTS.smart_turn_silence_ms,
        min_interrupt_ms=min_interrupt_ms,
    )
    stage.setup()
    return stage


def feed(stage: VadStage, *pieces: np.ndarray) -> list[Message]:
    """24 kHz float pieces, as 20 ms PCM chunks; everything the stage produced."""
    data = audio.encode(np.concatenate(pieces), audio.PCM)
    out: list[Message] = []
    for at in range(0, len(data), 960):
        out += stage.process(AudioIn(generation=0, data=data[at : at + 960], audio_format=audio.PCM))
    return out


def turns(out: list[Message]) -> list[SpeechStopped]:
    return [m for m in out if isinstance(m, SpeechStopped)]


SEMANTIC = TurnDetection(type="semantic_vad", eagerness="auto")
DEFAULTS = EngineConfig()  # the server's silences: when Smart Turn is asked, when a turn is sent ahead


def test_a_finished_question_ends_the_turn_before_the_server_vad_window_closes(models):
    question = spoken("What time does the store close?")
    # 350 ms of silence: Smart Turn has judged the pause; server_vad's 500 ms window is still open.
    semantic = feed(vad_stage(models, SEMANTIC), silence(0.5), question, silence(0.35))
    assert len(turns(semantic)) == 1
    assert [m.create_response for m in semantic if isinstance(m, Utterance)] == [True]
    server = feed(vad_stage(models, TurnDetection(type="server_vad")), silence(0.5), question, silence(0.35))
    assert turns(server) == []


def test_a_pause_in_mid_sentence_does_not_end_the_turn(models):
    # Smart Turn hears the first half as going on (0.01), and the whole sentence too (0.06): the turn ends at
    # the longest wait (auto: 4 s) after it. Chosen for its margin: Smart Turn's verdict on some cut sentences
    # moves by 0.5 with 0.1 % of noise added, or on another CPU (its rendering by Piper differs slightly).
    first, second = spoken_halves("I was wondering if you could | help me with my homework.", steady=True)
    out = feed(vad_stage(models, SEMANTIC), silence(0.5), first, silence(1.2), second, silence(4.5))
    stopped = turns(out)
    assert len(stopped) == 1, [m for m in out if isinstance(m, (SpeechStarted, SpeechStopped))]
    first_half_end_ms = 500 + len(first) * 1000 // 24000
    assert stopped[0].audio_end_ms > first_half_end_ms + 1200
    server = feed(
        vad_stage(models, TurnDetection(type="server_vad")), silence(0.5), first, silence(1.2), second, silence(1.0)
    )
    assert len(turns(server)) == 2  # the fixed window answers in the pause


def test_an_unfinished_turn_ends_after_the_eagerness_longest_wait(models):
    first, _ = spoken_halves("I was wondering if you could | help me with my homework.", steady=True)
    high = feed(vad_stage(models, replace(SEMANTIC, eagerness="high")), silence(0.5), first, silence(2.5))
    auto_stage = vad_stage(models, SEMANTIC)
    auto = feed(auto_stage, silence(0.5), first, silence(2.5))
    assert len(turns(high)) == 1 and turns(auto) == []  # high waits at most 2 s, auto 4 s
    assert len(turns(feed(auto_stage, silence(2.0)))) == 1  # the rest of auto's 4 s


@pytest.fixture(scope="module")
def readers() -> tuple[WhisperEngine, EndOfTurnLM]:
    """What reads the words of a pause: the STT (as the STT stage runs it) and the text turn model."""
    return WhisperEngine(), EndOfTurnLM()


def listening_stage(models, readers, detection: TurnDetection = SEMANTIC) -> VadStage:
    """A VAD stage that sends turns ahead and reads their words, at the default pipeline's silences."""
    context = SessionContext()
    context.settings = replace(SessionSettings(), turn_detection=detection)
    stage = VadStage(
        context,
        models[0],
        partial_every_ms=0,
        speculate_after_ms=DEFAULTS.semantic_speculate_after_ms,
        turn_model=models[1],
        check_after_ms=DEFAULTS.smart_turn_silence_ms,
        min_interrupt_ms=0,
        text_model=readers[1],
    )
    stage.setup()
    return stage


def feed_and_transcribe(stage: VadStage, whisper: WhisperEngine, *pieces: np.ndarray) -> list[Message]:
    """As ``feed``, and as the STT stage does: each turn sent ahead is transcribed and its words noted."""
    data = audio.encode(np.concatenate(pieces), audio.PCM)
    out: list[Message] = []
    for at in range(0, len(data), 960):
        for message in stage.process(AudioIn(generation=0, data=data[at : at + 960], audio_format=audio.PCM)):
            out.append(message)
            if isinstance(message, Utterance) and message.turn:
                stage.context.note_words(message.turn, whisper.transcribe(np.frombuffer(message.samples, np.float32)))
    return out


def test_a_pause_that_sounds_finished_after_unfinished_words_does_not_end_the_turn(models, readers):
    first, second = spoken_halves("Please remind me to call | my mother tomorrow morning.", steady=True)
    pause = silence(1.2)
    # The sound alone ends the turn in the pause: Smart Turn hears "Please remind me to call" as finished.
    assert models[1].probability(audio.resample(np.concatenate([first, silence(0.2)]), 24000, 16000)) >= 0.5
    by_sound = feed(vad_stage(models, SEMANTIC), silence(0.5), first, pause, second, silence(1.0))
    assert len(turns(by_sound)) == 2
    # With its words read, it waits for the rest of the sentence: one turn, ended after the second half.
    out = feed_and_transcribe(
        listening_stage(models, readers), readers[0], silence(0.5), first, pause, second, silence(1.0)
    )
    assert len(turns(out)) == 1, [m for m in out if isinstance(m, (SpeechStarted, SpeechStopped))]
    assert turns(out)[0].audio_end_ms > 500 + len(first) * 1000 // 24000 + 1200


def test_a_finished_question_with_its_words_read_still_ends_before_the_server_vad_window(models, readers):
    stage = listening_stage(models, readers)
    out = feed_and_transcribe(stage, readers[0], silence(0.5), spoken("What time does the store close?"), silence(0.35))
    assert len(turns(out)) == 1
    assert len([m for m in out if isinstance(m, TurnConfirmed)]) == 1  # the turn sent ahead is the one answered


def test_words_unfinished_wait_half_the_longest_wait_then_the_turn_ends(models, readers):
    first, _ = spoken_halves("Please remind me to call | my mother tomorrow morning.", steady=True)
    stage = listening_stage(models, readers)
    assert turns(feed_and_transcribe(stage, readers[0], silence(0.5), first, silence(1.9))) == []
    assert len(turns(feed_and_transcribe(stage, readers[0], silence(0.3)))) == 1  # auto: 2 s of 4 s


class Doubtful:
    """A FAKE text turn model: every message reads as ``chance`` likely finished."""

    def __init__(self, chance: float = 0.01) -> None:
        self.chance = chance

    def finished_probability(self, transcript: str) -> float:
        return self.chance


class Hears:
    """A FAKE STT: it hears ``text`` in every turn."""

    def __init__(self, text: str) -> None:
        self.text = text

    def transcribe(self, samples: np.ndarray) -> str:
        return self.text


def test_whisper_s_question_mark_lowers_the_floor_the_words_must_reach(models):
    question = spoken("What time does the store close?")  # Smart Turn: finished
    with_mark = listening_stage(models, (None, Doubtful()))
    out = feed_and_transcribe(with_mark, Hears("What time does the store close?"), silence(0.5), question, silence(0.6))
    assert len(turns(out)) == 1  # 0.01 is above the floor for a question Whisper marks as one
    without = listening_stage(models, (None, Doubtful()))
    out = feed_and_transcribe(without, Hears("What time does the store close"), silence(0.5), question, silence(0.6))
    assert turns(out) == []  # below the floor: the pause waits for more speech


def test_whisper_s_question_mark_lowers_the_mark_of_words_sure_to_end_an_unfinished_sounding_pause(models):
    question = spoken("What color is the sky?")
    for heard, ended in (("What color is the sky?", 1), ("What color is the sky", 0)):
        stage = listening_stage((models[0], HearsGoingOn()), (None, Doubtful(0.06)))
        out = feed_and_transcribe(stage, Hears(heard), silence(0.5), question, silence(1.5))
        assert len(turns(out)) == ended, heard  # 0.06: above 0.5 / 100, far under 0.5


class HearsGoingOn:
    """Smart Turn's misjudgment of some complete questions, scripted: every pause sounds unfinished."""

    def probability(self, samples: np.ndarray) -> float:
        return 0.05


def test_words_that_read_finished_but_not_beyond_doubt_end_an_unfinished_sounding_pause_after_the_half_wait(models):
    question = spoken("Is the sun a star?")
    # Whisper's "is the sun is star" reads 0.29: over the floor (0.2), under the sure mark (0.5).
    stage = listening_stage((models[0], HearsGoingOn()), (None, Doubtful(0.29)))
    assert turns(feed_and_transcribe(stage, Hears("is the sun is star"), silence(0.5), question, silence(1.9))) == []
    assert len(turns(feed_and_transcribe(stage, Hears("is the sun is star"), silence(0.3)))) == 1  # auto: 2 s of 4
    # Under the floor the sound decides: the longest wait.
    below = listening_stage((models[0], HearsGoingOn()), (None, Doubtful(0.19)))
    assert turns(feed_and_transcribe(below, Hears("is the sun is star"), silence(0.5), question, silence(3.8))) == []
    assert len(turns(feed_and_transcribe(below, Hears("is the sun is star"), silence(0.4)))) == 1


class CountedReader:
    """The real text turn model, counting its readings."""

    def __init__(self, reader: EndOfTurnLM) -> None:
        self.reader, self.read = reader, []

    def finished_probability(self, transcript: str) -> float:
        self.read.append(transcript)
        return self.reader.finished_probability(transcript)


def test_a_question_that_sounds_unfinished_ends_once_its_words_read_as_finished(models, readers):
    question = spoken("What is the capital of France?")
    by_sound = vad_stage((models[0], HearsGoingOn()), SEMANTIC)
    assert turns(feed(by_sound, silence(0.5), question, silence(1.5))) == []  # the sound alone: auto waits 4 s
    stage = listening_stage((models[0], HearsGoingOn()), readers)
    out = feed_and_transcribe(stage, readers[0], silence(0.5), question, silence(1.5))
    assert len(turns(out)) == 1, [m for m in out if isinstance(m, (SpeechStarted, SpeechStopped))]
    assert len([m for m in out if isinstance(m, TurnConfirmed)]) == 1


class HearsNothing:
    """An STT that makes out no words (a mumble, or a failed transcription, which notes none either)."""

    def transcribe(self, samples: np.ndarray) -> str:
        return ""


def test_no_words_leave_an_unfinished_sounding_pause_to_the_sound(models, readers):
    reader = CountedReader(readers[1])
    stage = listening_stage((models[0], HearsGoingOn()), (readers[0], reader))
    out = feed_and_transcribe(
        stage, HearsNothing(), silence(0.5), spoken("What is the capital of France?"), silence(1.5)
    )
    assert turns(out) == [] and reader.read == []  # the reader would score no words 1.0: it is not asked


def test_a_sentence_cut_where_it_sounds_unfinished_still_waits_and_its_words_are_read_once(models, readers):
    first, _ = spoken_halves("I was wondering if you could | help me with my homework.", steady=True)
    reader = CountedReader(readers[1])
    stage = listening_stage(models, (readers[0], reader))
    assert turns(feed_and_transcribe(stage, readers[0], silence(0.5), first, silence(3.5))) == []
    assert len(reader.read) == 1 and "wondering" in reader.read[0], reader.read
    assert len(turns(feed_and_transcribe(stage, readers[0], silence(0.7)))) == 1  # auto's longest wait, 4 s


def test_create_response_false_commits_the_turn_without_a_response(models):
    out = feed(
        vad_stage(models, replace(SEMANTIC, create_response=False)),
        silence(0.5),
        spoken("What time does the store close?"),
        silence(0.4),
    )
    assert [m.create_response for m in out if isinstance(m, Utterance)] == [False]


def assistant_speaks(stage: VadStage) -> None:
    stage.context.admit(
        ResponseStarted(
            generation=0,
            response_id="resp_1",
            item_id="item_1",
            output_modalities=("audio",),
            output_format=audio.PCM,
            voice="alloy",
            out_of_band=False,
        )
    )


@pytest.mark.parametrize("mode", [SEMANTIC, TurnDetection(type="server_vad")], ids=["semantic_vad", "server_vad"])
def test_a_short_mm_hmm_while_the_assistant_speaks_is_dropped(models, mode):
    stage = vad_stage(models, mode, min_interrupt_ms=640)
    assistant_speaks(stage)
    out = feed(stage, silence(0.3), spoken("Mm-hmm."), silence(1.0), spoken("Yeah."), silence(1.0))
    assert out == []


@pytest.mark.parametrize("mode", [SEMANTIC, TurnDetection(type="server_vad")], ids=["semantic_vad", "server_vad"])
def test_a_real_interruption_while_the_assistant_speaks_starts_a_turn(models, mode):
    stage = vad_stage(models, mode, min_interrupt_ms=640)
    assistant_speaks(stage)
    # 4.5 s of silence: the turn ends whatever Smart Turn makes of it (auto waits at most 4 s).
    out = feed(stage, silence(0.3), spoken("Hold on, that is not what I asked."), silence(4.5))
    started = [m for m in out if isinstance(m, SpeechStarted)]
    assert len(started) == 1 and len(turns(out)) == 1
    assert started[0].audio_start_ms < 400  # where the speech began (with its prefix padding), not where it counted


def test_a_short_answer_when_the_assistant_is_silent_is_a_turn(models):
    stage = vad_stage(models, TurnDetection(type="server_vad"), min_interrupt_ms=640)
    assistant_speaks(stage)
    stage.context.admit(ResponseFinished(generation=0, response_id="resp_1", status="cancelled"))
    out = feed(stage, silence(0.3), spoken("Yeah."), silence(1.0))
    assert len([m for m in out if isinstance(m, SpeechStarted)]) == 1 and len(turns(out)) == 1


def test_a_bad_smart_turn_path_stops_the_start_with_a_clear_message(tmp_path):
    missing = tmp_path / "no-such-smart-turn.onnx"
    config = replace(PoolConfig(size=1, profile="real"), engines=EngineConfig(smart_turn_model=str(missing)))
    with override_settings(S2S_POOL=config), pytest.raises(CommandError) as failure:
        call_command("warmup_pool", stdout=io.StringIO())
    assert f"Smart Turn model not found at {missing} (S2S_SMART_TURN_MODEL)" in str(failure.value)


async def test_a_spoken_answer_goes_on_through_an_mm_hmm_and_stops_at_an_interruption(real_server):
    ws = await connect(real_server)
    try:
        await ws.send(
            json.dumps(
                {
                    "type": "session.update",
                    "session": {
                        "type": "realtime",
                        "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}},
                        "instructions": "You are a storyteller. Always answer with a long story of many sentences.",
                    },
                }
            )
        )
        turn = await speak(ws, spoken("Tell me a long story about a dragon."), until="response.output_audio.delta")
        response_id = turn.events[-1]["response_id"]
        backchannel = Turn()
        await asyncio.gather(stream(ws, spoken("Mm-hmm."), silence(0.8)), collect_for(ws, backchannel, seconds=2.0))
        assert "input_audio_buffer.speech_started" not in backchannel.types(), backchannel.types()
        assert all(e["response"]["status"] != "cancelled" for e in backchannel.events if e["type"] == "response.done")
        # The story (up to the LM's token limit) takes several seconds to generate: it is still going here.
        assert "response.done" not in backchannel.types(), "the story ended before the interruption could come"
        await stream(ws, spoken("Hold on, that is not what I asked."), silence(1.0), pace=0.0)
        after = await collect(ws, Turn(), "response.done", timeout=60)
    finally:
        await ws.close()
    types = after.types()
    started = types.index("input_audio_buffer.speech_started")
    done = after.first("response.done")["response"]
    assert done["id"] == response_id and done["status"] == "cancelled"
    assert [e for e in after.events[started:] if e["type"] == "response.output_audio.delta"] == []


async def stream(ws, *pieces: np.ndarray, pace: float = 1.0) -> None:
    for chunk in pcm16_chunks(np.concatenate(pieces)):
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        await asyncio.sleep(0.02 * pace)


async def collect_for(ws, turn: Turn, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            turn.events.append(json.loads(await asyncio.wait_for(ws.recv(), left)))
        except TimeoutError:
            return
