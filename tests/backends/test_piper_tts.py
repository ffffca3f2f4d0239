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
    # Heard at 1.5 and 0.5: at 0.25 Piper's random noise scale now and then drawls a word past Whisper tiny.
    for speed in (1.5, 0.5):
        samples = np.concatenate(list(piper_engine.synthesize(SENTENCE, speed=speed)))
        heard = whisper_engine.transcribe(resample(samples, piper_engine.sample_rate, 16000), language="en")
        assert word_errors(heard, SENTENCE) <= 2, (speed, heard)


def test_without_lead_cuts_the_near_silence_before_the_voice_but_10_ms():
    from pipelines.backends.piper_tts import without_lead

    rate = 22050
    voice = 0.3 * np.cos(2 * np.pi * 220 * np.arange(rate // 5) / rate)  # loud from its first sample
    samples = np.concatenate([np.zeros(rate // 20), np.full(rate // 100, 0.0002), voice, np.zeros(rate // 10)])
    cut = without_lead(samples.astype(np.float32), rate)
    assert len(cut) == rate * 10 // 1000 + len(voice) + rate // 10  # 10 ms of the hiss before the voice, the rest
    assert np.array_equal(cut[rate * 10 // 1000 :], samples[rate // 20 + rate // 100 :].astype(np.float32))
    silent = np.zeros(rate // 10, dtype=np.float32)
    assert without_lead(silent, rate) is silent  # nothing to find: kept as it is


def test_piper_s_texts_start_at_their_voice(piper_engine):
    from pipelines.backends.piper_tts import LEAD_KEEP_MS

    rate = piper_engine.sample_rate
    for text in ("Bees make", "First, you", "Paris is"):  # 25-59 ms of near-silence in 20 renderings each
        raw = piper_engine._voice.synthesize(text)  # Piper's own, without the cut
        raw_audio = next(iter(raw)).audio_float_array
        raw_lead_ms = np.flatnonzero(np.abs(raw_audio) >= 0.001)[0] * 1000 / rate
        samples = list(piper_engine.synthesize(f"{text} honey. And then some."))
        lead_ms = np.flatnonzero(np.abs(samples[0]) >= 0.001)[0] * 1000 / rate
        assert raw_lead_ms > LEAD_KEEP_MS + 5, (text, raw_lead_ms)
        assert lead_ms <= LEAD_KEEP_MS + 1, (text, lead_ms)
        assert len(samples) == 2 and len(samples[0]) > rate // 3  # two sentences, the words all there
