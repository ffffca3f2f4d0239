"""``manage.py warmup_pool``: timings per unit, and a clear failure when a model is missing."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from pipelines.config import EngineConfig, PoolConfig
from realtime.management.commands.warmup_pool import Command


def test_it_runs_a_spoken_turn_through_every_unit_and_reports_each_stage():
    out = io.StringIO()
    report = Command(stdout=out).warm(PoolConfig(size=2, profile="loopback"))
    assert sorted(report["units"]) == [0, 1]
    for timings in report["units"].values():
        assert {"lm_first_token_s", "tts_first_audio_s", "stt_s", "warmup_s"} <= set(timings)
    text = out.getvalue()
    assert "warming unit 1" in text and "unit 0:" in text and "stt=" in text


def test_it_exits_with_a_clear_message_when_a_model_is_missing(tmp_path):
    missing = tmp_path / "no-such-whisper-model"
    config = replace(PoolConfig(size=1, profile="real"), engines=EngineConfig(stt_model=str(missing)))
    with override_settings(S2S_POOL=config), pytest.raises(CommandError) as failure:
        call_command("warmup_pool", stdout=io.StringIO())
    assert "stt (faster-whisper) failed to load" in str(failure.value)


def test_the_warm_up_turn_comes_through_server_vad_as_a_clients_first_turn_does():
    """A manual commit left the VAD model cold (and the speculative and partial-transcript paths unrun): the
    first user's turn paid for them. The warm-up's spoken turn now runs every frame through the VAD model,
    and the turn ends by its silence window."""
    from pipelines.factory import build_pool, synthetic_turn
    from pipelines.stages.vad import VadStage

    pool = build_pool(PoolConfig(size=1, profile="loopback"))
    unit = pool.units[0]
    unit.start(timeout=60)
    try:
        vad = next(stage for stage in unit.stages() if isinstance(stage, VadStage))
        frames: list[float] = []
        prob = vad._state.prob
        vad._state.prob = lambda frame: frames.append(1.0) or prob(frame)
        timings = synthetic_turn(unit, timeout=30)
        assert len(frames) > 50, f"the VAD model saw {len(frames)} frames of the warm-up's spoken turn"
        assert {"stt_s", "spoken_turn_tts_first_audio_s"} <= set(timings)
    finally:
        pool.shutdown()
