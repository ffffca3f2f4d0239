"""The one place where models load and pools are built (server start, ``warmup_pool``, tests)."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from pipelines import audio
from pipelines.config import DEFAULT_INSTRUCTIONS, PoolConfig, TurnDetection
from pipelines.engines import Engines, load_engines, translation_engines
from pipelines.errors import ModelLoadError
from pipelines.ids import new_id
from pipelines.loopback import loopback_engines, loopback_translations
from pipelines.messages import (
    AddItem,
    AudioIn,
    AudioOut,
    CommitAudio,
    HistoryItem,
    Outbound,
    PipelineError,
    ResponseFinished,
    ResponseRequest,
    TranscriptCompleted,
)
from pipelines.pool import PipelinePool
from pipelines.stages.base import SessionContext, Stage
from pipelines.stages.lm import LmStage
from pipelines.stages.stt import SttStage
from pipelines.stages.tts import TtsStage
from pipelines.stages.vad import VadStage
from pipelines.translation import Translations
from pipelines.unit import PipelineUnit

logger = logging.getLogger(__name__)


def loopback_stages(context: SessionContext, voices: Sequence[str]) -> list[Stage]:
    vad, stt, lm, tts = loopback_engines(context)
    return [
        # The FAKE stages as the protocol tests know them: no partial transcripts, no speculation, and any
        # speech while a reply plays is a barge-in.
        VadStage(context, vad, partial_every_ms=0, speculate_after_ms=0, min_interrupt_ms=0),
        SttStage(context, stt),
        LmStage(context, lm),
        TtsStage(context, {voice: tts for voice in voices}),
    ]


def stage_factory(
    config: PoolConfig, progress: Callable[[str], None] | None = None
) -> Callable[[SessionContext], list[Stage]]:
    """Loads the shared engines once and returns a function that builds one unit's stages."""
    if config.profile == "loopback":  # the FAKE voice plays every name a session may ask for
        voices = config.engines.all_voices
        return lambda context: loopback_stages(context, voices)
    if config.profile == "real":
        return _loaded_engines(config, progress).build_stages
    raise ValueError(f"unknown pipeline profile {config.profile!r}")


def _loaded_engines(config: PoolConfig, progress: Callable[[str], None] | None) -> Engines:
    """The real profile's engines. One that its packages lack (an engine on PyTorch where ``make run`` left it
    out, a Kokoro voice not installed) is said at once, with the command, before any model loads."""
    from pipelines.backends.registry import unmet

    problems = unmet(config.engines)
    if problems:
        raise ModelLoadError("; ".join(problems))
    return load_engines(config.engines, config.size, progress)


def build_pool(config: PoolConfig, progress: Callable[[str], None] | None = None) -> PipelinePool:
    if config.profile == "real":
        engines = _loaded_engines(config, progress)
        build: Callable[[SessionContext], list[Stage]] = engines.build_stages
        # The translation sessions' models: the loaded engines' own, and the multilingual Whisper when the first
        # translation session asks (pipelines.engines.translation_engines).
        translations = Translations(functools.partial(translation_engines, engines, config.engines, config.size))
    else:
        build, translations = stage_factory(config, progress), loopback_translations()
    units = [
        PipelineUnit(i, build, release_timeout_s=config.release_timeout_s, queue_size=config.queue_size)
        for i in range(config.size)
    ]
    pool = PipelinePool(units)
    pool.translations = translations
    return pool


def synthetic_turn(unit: PipelineUnit, timeout: float = 120.0) -> dict[str, float]:
    """Runs one spoken turn through every stage of an idle unit and returns per-stage timings.

    The unit first answers a text question (LM and TTS); that spoken answer is then fed back as the
    user's audio under server VAD, as a client's turn comes: Silero on every frame, partial transcripts
    while it speaks, the speculative transcript and answer at the first pause, the turn confirmed when
    the silence window closes. So every engine, and every path a first turn takes through it, has run
    once before a client arrives. (A manual commit, as before, left the VAD model and those paths cold:
    the first user's turn paid for them.) Should the VAD hear no turn in the answer's voice, the audio
    is committed by hand instead. The turn runs under a session's default instructions, so the LM's
    context ends up holding their KV cache for the first session (about 2 s of prompt on a busy 2-core
    VM, paid by the first answer after a start when the warm-up had instructions of its own).
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()
    collector = _Collector()
    generation = unit.begin(collector.add, new_id("warmup"))
    try:
        voice = next(iter(unit_voices(unit)), "alloy")
        unit.context.settings = replace(
            unit.context.settings,
            instructions=DEFAULT_INSTRUCTIONS,  # a session's own: the first session's prompt finds their KV cache
            output_modalities=("audio",),
            max_output_tokens=24,
            voice=voice,
            output_format=audio.PCM,
            temperature=0.0,
        )
        unit.submit(AddItem(generation=generation, item=HistoryItem(new_id("item"), "user", "Hello, who are you?")))
        unit.submit(ResponseRequest.from_settings(unit.context.settings, generation))
        first = collector.wait_finished(timeout, unit.index)
        timings.update(first.latencies)
        spoken = b"".join(out.data for out in collector.outputs if isinstance(out, AudioOut))
        collector.reset()
        rate = audio.RATES[audio.PCM]
        stream = bytes(rate) + spoken + bytes(rate * 3)  # half a second of silence before, 1.5 s after
        _stream(unit, generation, stream)
        try:
            transcript = collector.wait_transcript(VAD_TURN_S + len(stream) / (2 * rate), unit.index)
        except TimeoutError:
            logger.warning("unit %s: warm-up: server VAD heard no turn; committing the audio by hand", unit.index)
            unit.context.settings = replace(unit.context.settings, turn_detection=TurnDetection(type=None))
            _stream(unit, generation, stream)
            again = ResponseRequest.from_settings(unit.context.settings, generation)
            unit.submit(CommitAudio(generation=generation, item_id=new_id("item"), response=again))
            transcript = collector.wait_transcript(timeout, unit.index)
        if transcript.stt_s is not None:
            timings["stt_s"] = transcript.stt_s
        second = collector.wait_finished(timeout, unit.index)
        for key, value in second.latencies.items():
            timings[f"spoken_turn_{key}"] = value
    finally:
        unit.end()
    timings["warmup_s"] = time.perf_counter() - started
    return timings


VAD_TURN_S = 30.0  # beyond the audio's own length: the most a warm-up waits for server VAD's transcript


def _stream(unit: PipelineUnit, generation: int, stream: bytes) -> None:
    """Submits PCM16 audio in 20 ms chunks, as a client's microphone sends it (not paced: it queues)."""
    chunk = audio.RATES[audio.PCM] * 2 // 50
    for at in range(0, len(stream), chunk):
        unit.submit(AudioIn(generation=generation, data=stream[at : at + chunk], audio_format=audio.PCM))


class _Collector:
    """Gathers a warm-up turn's output."""

    def __init__(self) -> None:
        self.outputs: list[Outbound] = []
        self._changed = threading.Condition()

    def add(self, out: Outbound) -> None:
        with self._changed:
            self.outputs.append(out)
            self._changed.notify_all()

    def reset(self) -> None:
        with self._changed:
            self.outputs.clear()

    def _wait(self, kind: type, timeout: float, index: int) -> Outbound:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(isinstance(o, (kind, PipelineError)) for o in self.outputs), timeout
            )
            if not found:
                raise TimeoutError(f"unit {index}: warm-up got no {kind.__name__} within {timeout:.0f}s")
            out = next(o for o in self.outputs if isinstance(o, (kind, PipelineError)))
        if isinstance(out, PipelineError):
            raise RuntimeError(f"unit {index}: warm-up failed: {out.message}")
        return out

    def wait_finished(self, timeout: float, index: int) -> ResponseFinished:
        out = self._wait(ResponseFinished, timeout, index)
        assert isinstance(out, ResponseFinished)
        if out.status not in ("completed", "incomplete"):
            raise RuntimeError(f"unit {index}: warm-up response {out.status}: {out.reason}")
        return out

    def wait_transcript(self, timeout: float, index: int) -> TranscriptCompleted:
        out = self._wait(TranscriptCompleted, timeout, index)
        assert isinstance(out, TranscriptCompleted)
        return out


def unit_voices(unit: PipelineUnit) -> list[str]:
    for stage in unit.stages():
        if isinstance(stage, TtsStage):
            return list(stage.voices)
    return []
