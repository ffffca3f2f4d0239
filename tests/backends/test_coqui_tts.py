from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines.backends.coqui_tts import CoquiEngine


def test_it_loads_a_checkpoint_and_config_from_disk(coqui_engine, tiny_vits_files):
    _, config_path = tiny_vits_files
    rate = json.loads(config_path.read_text())["audio"]["sample_rate"]
    assert coqui_engine.sample_rate == rate
    assert not coqui_engine.is_xtts


def test_a_sentence_with_nothing_the_voice_can_say_is_skipped_not_fatal(coqui_engine):
    # The tiny test voice has no digits and no emoji: VITS itself raises on such input.
    assert coqui_engine.split_sentences("Good morning. 42") == ["Good morning.", "42"]
    chunks = list(coqui_engine.synthesize("Good morning. 42"))
    assert len(chunks) == 1 and len(chunks[0]) > 0
    assert list(coqui_engine.synthesize("\U0001f600")) == []


def test_it_needs_a_model():
    with pytest.raises(ValueError):
        CoquiEngine()


def test_speed_scales_a_vits_voices_durations_and_restores_the_model(coqui_engine):
    assert coqui_engine.speed_method == "length_scale"
    base = coqui_engine._model.length_scale

    def samples(speed: float) -> int:
        return sum(len(c) for c in coqui_engine.synthesize("Good morning to you all.", speed=speed))

    normal, fast, slow = samples(1.0), samples(1.5), samples(0.5)
    # The untrained test voice gives many phonemes the one-frame minimum, which no speed shortens.
    assert fast < 0.95 * normal and slow > 1.4 * normal, (fast, normal, slow)
    assert coqui_engine._model.length_scale == base


def test_time_stretch_keeps_the_pitch_and_scales_the_length():
    from pipelines.audio import time_stretch

    rate = 22050
    t = np.arange(rate, dtype=np.float32) / rate
    tone = (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    for speed in (1.5, 0.5):
        out = time_stretch(tone, speed)
        assert abs(len(out) - len(tone) / speed) < rate * 0.02
        spectrum = np.abs(np.fft.rfft(out))
        assert abs(np.argmax(spectrum) * rate / len(out) - 300) < 5
