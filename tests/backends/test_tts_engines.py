"""What every TTS engine promises the TTS stage, run on Piper (the default voice) and on a tiny Coqui VITS."""

from __future__ import annotations

import threading

import numpy as np
import pytest


@pytest.fixture(params=["piper_engine", "coqui_engine"])
def tts_engine(request):
    return request.getfixturevalue(request.param)


def test_it_yields_finite_float32_audio_per_sentence(tts_engine):
    chunks = list(tts_engine.synthesize("Hello there. How are you today?"))
    assert len(chunks) == 2
    for chunk in chunks:
        assert chunk.dtype == np.float32 and chunk.ndim == 1
        assert len(chunk) > 0
        assert np.isfinite(chunk).all()


def test_blank_text_yields_nothing(tts_engine):
    assert list(tts_engine.synthesize("   ")) == []


def test_cancel_stops_before_the_next_sentence(tts_engine):
    cancel = threading.Event()
    chunks = []
    for chunk in tts_engine.synthesize("One. Two. Three. Four.", cancel=cancel):
        chunks.append(chunk)
        cancel.set()
    assert len(chunks) == 1


def test_two_threads_can_synthesize_at_once(tts_engine):
    results: dict[int, int] = {}

    def work(i: int) -> None:
        results[i] = sum(len(c) for c in tts_engine.synthesize("Good morning. Good night."))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 2 and all(n > 0 for n in results.values())
