from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from pipelines.backends.piper_tts import default_voice_path


def test_the_default_voice_is_the_packaged_joe_voice():
    path = Path(default_voice_path())
    assert path.is_file()
    assert Path(f"{path}.json").is_file()


def test_it_yields_float32_audio_per_sentence(piper_engine):
    chunks = list(piper_engine.synthesize("Hello there. How are you today?"))
    assert piper_engine.sample_rate == 22050
    assert len(chunks) == 2
    for chunk in chunks:
        assert chunk.dtype == np.float32 and chunk.ndim == 1
        assert len(chunk) > piper_engine.sample_rate // 4
        assert np.isfinite(chunk).all()
        assert np.abs(chunk).max() > 0.05


def test_blank_text_yields_nothing(piper_engine):
    assert list(piper_engine.synthesize("   ")) == []


def test_cancel_stops_before_the_next_sentence(piper_engine):
    cancel = threading.Event()
    chunks = []
    for chunk in piper_engine.synthesize("One. Two. Three. Four.", cancel=cancel):
        chunks.append(chunk)
        cancel.set()
    assert len(chunks) == 1


def test_two_threads_can_synthesize_at_once(piper_engine):
    results: dict[int, int] = {}

    def work(i: int) -> None:
        results[i] = sum(len(c) for c in piper_engine.synthesize("The weather is nice today."))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(n > 0 for n in results.values())
