"""A transcription session with the real Silero VAD and the real faster-whisper (the default models, CPU).

A transcription session uses only VAD and STT, so the units here have the real VAD and STT and the
FAKE loopback LM and TTS (never reached: a transcription session makes no responses).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import pytest
from channels.testing import WebsocketCommunicator

from pipelines.backends.faster_whisper_stt import WhisperEngine
from pipelines.backends.silero import SileroVadModel
from pipelines.loopback import FakeLanguageModel, FakeSynthesizer, _Memory
from pipelines.pool import PipelinePool
from pipelines.stages.base import SessionContext, Stage
from pipelines.stages.lm import LmStage
from pipelines.stages.stt import SttStage
from pipelines.stages.tts import TtsStage
from pipelines.stages.vad import VadStage
from pipelines.unit import PipelineUnit
from realtime.node import runtime
from s2s_project.asgi import application
from tests.support.client import RealtimeClient, types
from tests.support.speech import silence, spoken

pytestmark = [pytest.mark.real_models, pytest.mark.django_db(transaction=True)]

QUESTION = "What is the capital of France?"
LOGPROBS = "item.input_audio_transcription.logprobs"


class SpyWhisper(WhisperEngine):
    """The real engine, recording what each call hands faster-whisper's ``WhisperModel.transcribe``."""

    def __init__(self) -> None:
        super().__init__(cpu_threads=2)
        self.calls: list[dict] = []
        self._lock = threading.Lock()
        model_transcribe = self._model.transcribe

        def recording(audio, **options):
            with self._lock:
                self.calls.append(options)
            return model_transcribe(audio, **options)

        self._model.transcribe = recording  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def whisper() -> SpyWhisper:
    return SpyWhisper()


@pytest.fixture
def stt_pool(whisper, settings) -> Iterator[PipelinePool]:
    settings.S2S_AUTH_REQUIRED = False
    vad = SileroVadModel()

    def stages(context: SessionContext) -> list[Stage]:
        memory = _Memory(context)
        return [
            VadStage(context, vad, partial_every_ms=0, speculate_after_ms=0, min_interrupt_ms=0),
            SttStage(context, whisper),
            LmStage(context, FakeLanguageModel()),
            TtsStage(context, {"alloy": FakeSynthesizer(memory)}),
        ]

    pool = PipelinePool([PipelineUnit(0, stages)])
    pool.start()
    runtime.current().install(pool)
    yield pool
    runtime.current().install(None)
    pool.shutdown()


async def test_faster_whisper_transcribes_a_spoken_turn_with_its_words_logprobs_and_no_answer(stt_pool, whisper):
    comm = WebsocketCommunicator(application, "/v1/realtime?intent=transcription", subprotocols=["realtime"])
    assert (await comm.connect(timeout=10))[0]
    client = RealtimeClient.over_communicator(comm)
    try:
        assert (await client.until("session.created", timeout=10))["session"]["type"] == "transcription"
        await client.update_session(
            type="transcription",
            include=[LOGPROBS],
            audio={
                "input": {
                    "transcription": {"model": "gpt-4o-mini-transcribe", "language": "en", "prompt": "Geography quiz."},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 400},
                }
            },
        )
        whisper.calls.clear()
        await client.append(silence(0.5))
        await client.append(spoken(QUESTION))
        await client.append(silence(1.0))
        events = await client.collect("conversation.item.input_audio_transcription.completed", timeout=60)
        events += await client.drain(1.0)
        kinds = types(events)
        assert not [k for k in kinds if k.startswith("response.")], kinds
        completed = events[kinds.index("conversation.item.input_audio_transcription.completed")]
        text = completed["transcript"].lower()
        assert "capital" in text and "france" in text, text
        logprobs = completed["logprobs"]
        assert "".join(entry["token"] for entry in logprobs).strip() == completed["transcript"]
        assert all(-30 < entry["logprob"] <= 0 for entry in logprobs)
        assert math.exp(max(entry["logprob"] for entry in logprobs)) > 0.5  # a clear voice: some words are sure
        assert 1.0 < completed["usage"]["seconds"] < 4.0
        # language and prompt reached faster-whisper, with word probabilities asked for
        assert whisper.calls and all(
            call["language"] == "en" and call["initial_prompt"] == "Geography quiz." for call in whisper.calls
        )
        assert any(call.get("word_timestamps") for call in whisper.calls)
    finally:
        await comm.disconnect(timeout=10)
