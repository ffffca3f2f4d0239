from __future__ import annotations

from pathlib import Path

import numpy as np

from pipelines.backends.piper_tts import default_voice_path


def test_the_default_voice_is_the_packaged_joe_voice():
    path = Path(default_voice_path())
    assert path.is_file()
    assert Path(f"{path}.json").is_file()


def test_the_default_voice_speaks_audibly_at_its_rate(piper_engine):
    chunks = list(piper_engine.synthesize("Hello there. How are you today?"))
    assert piper_engine.sample_rate == 22050
    for chunk in chunks:
        assert len(chunk) > piper_engine.sample_rate // 4
        assert np.abs(chunk).max() > 0.05


SENTENCE = "Please book a table for four people at seven tonight."


def _seconds(engine, speed: float) -> float:
    return sum(len(c) for c in engine.synthesize(SENTENCE, speed=speed)) / engine.sample_rate


def test_speed_shortens_and_lengthens_the_same_words(piper_engine, whisper_engine):
    from tests.backends.conftest import resample
    from tests.support.speech import word_errors

    normal, fast, slow = (_seconds(piper_engine, s) for s in (1.0, 1.5, 0.25))
    # Piper's length scale stretches the phonemes; the pauses around them scale less.
    assert fast < 0.8 * normal, (fast, normal)
    assert slow > 2.5 * normal, (slow, normal)
    for speed in (1.5, 0.25):
        samples = np.concatenate(list(piper_engine.synthesize(SENTENCE, speed=speed)))
        heard = whisper_engine.transcribe(resample(samples, piper_engine.sample_rate, 16000), language="en")
        assert word_errors(heard, SENTENCE) <= 2, (speed, heard)
