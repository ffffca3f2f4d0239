"""The one place where models load and pools are built (server start, ``warmup_pool``, tests)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from pipelines.config import PoolConfig
from pipelines.ids import new_id
from pipelines.loopback import loopback_engines
from pipelines.messages import AddItem, HistoryItem, Outbound, ResponseFinished, ResponseRequest, TranscriptCompleted
from pipelines.pool import PipelinePool
from pipelines.stages.base import SessionContext, Stage
from pipelines.stages.lm import LmStage
from pipelines.stages.stt import SttStage
from pipelines.stages.tts import TtsStage
from pipelines.stages.vad import VadStage
from pipelines.unit import PipelineUnit

logger = logging.getLogger(__name__)


def loopback_stages(context: SessionContext, voices: Sequence[str]) -> list[Stage]:
    vad, stt, lm, tts = loopback_engines()
    return [
        VadStage(context, vad),
        SttStage(context, stt),
        LmStage(context, lm),
        TtsStage(context, {voice: tts for voice in voices}),
    ]


def stage_factory(config: PoolConfig, progress: Callable[[str], None] | None = None) -> Callable[[SessionContext], list[Stage]]:
    """Loads the shared engines once and returns a function that builds one unit's stages."""
    voices = config.engines.voices
    if config.profile == "loopback":
        return lambda context: loopback_stages(context, voices)
    if config.profile == "real":
        from pipelines.engines import load_engines

        engines = load_engines(config.engines, progress)
        return engines.build_stages
    raise ValueError(f"unknown pipeline profile {config.profile!r}")


def build_pool(config: PoolConfig, progress: Callable[[str], None] | None = None) -> PipelinePool:
    build = stage_factory(config, progress)
    units = [
        PipelineUnit(i, build, release_timeout_s=config.release_timeout_s, queue_size=config.queue_size)
        for i in range(config.size)
    ]
    return PipelinePool(units)


def synthetic_turn(unit: PipelineUnit, timeout: float = 300.0) -> dict[str, float]:
    """Runs one text turn through every stage of an idle unit and returns its timings.

    Used to warm a unit (first-call costs of every engine) before it takes a session.
    """
    import threading

    done = threading.Event()
    result: dict[str, object] = {}

    def sink(out: Outbound) -> None:
        if isinstance(out, ResponseFinished):
            result["finished"] = out
            done.set()
        elif isinstance(out, TranscriptCompleted):
            result["stt_s"] = out.stt_s

    started = time.perf_counter()
    generation = unit.begin(sink, new_id("warmup"))
    try:
        unit.submit(AddItem(generation=generation, item=HistoryItem(new_id("item"), "user", "Hello, who are you?")))
        unit.submit(ResponseRequest(generation=generation, response_id=new_id("resp"), instructions="Answer in one short sentence.",
                                    output_modalities=("audio",), max_output_tokens=16, voice=next(iter(unit_voices(unit)), "alloy"),
                                    output_format="audio/pcm", temperature=0.0))
        if not done.wait(timeout):
            raise TimeoutError(f"unit {unit.index}: warm-up turn did not finish in {timeout:.0f}s")
    finally:
        unit.end()
    finished = result["finished"]
    assert isinstance(finished, ResponseFinished)
    if finished.status != "completed" and finished.status != "incomplete":
        raise RuntimeError(f"unit {unit.index}: warm-up turn {finished.status}: {finished.reason}")
    timings = dict(finished.latencies)
    timings["turn_s"] = time.perf_counter() - started
    return timings


def unit_voices(unit: PipelineUnit) -> list[str]:
    for stage in unit.stages():
        if isinstance(stage, TtsStage):
            return list(stage.voices)
    return []
