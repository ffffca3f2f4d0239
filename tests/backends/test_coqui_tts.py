from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from pipelines.backends.coqui_tts import CoquiEngine


def test_it_loads_a_checkpoint_and_config_from_disk(coqui_engine, tiny_vits_files):
    _, config_path = tiny_vits_files
    rate = json.loads(config_path.read_text())["audio"]["sample_rate"]
    assert coqui_engine.sample_rate == rate
    assert not coqui_engine.is_xtts


def test_it_yields_finite_float32_audio_per_sentence(coqui_engine):
    chunks = list(coqui_engine.synthesize("Hello there. How are you today?"))
    assert len(chunks) == 2
    for chunk in chunks:
        assert chunk.dtype == np.float32 and chunk.ndim == 1
        assert len(chunk) > 0
        assert np.isfinite(chunk).all()


def test_a_sentence_with_nothing_the_voice_can_say_is_skipped_not_fatal(coqui_engine):
    # The tiny test voice has no digits and no emoji: VITS itself raises on such input.
    assert coqui_engine.split_sentences("Good morning. 42") == ["Good morning.", "42"]
    chunks = list(coqui_engine.synthesize("Good morning. 42"))
    assert len(chunks) == 1 and len(chunks[0]) > 0
    assert list(coqui_engine.synthesize("\U0001F600")) == []


def test_cancel_stops_before_the_next_sentence(coqui_engine):
    cancel = threading.Event()
    chunks = []
    for chunk in coqui_engine.synthesize("One. Two. Three.", cancel=cancel):
        chunks.append(chunk)
        cancel.set()
    assert len(chunks) == 1


def test_two_threads_can_share_the_engine(coqui_engine):
    results: dict[int, int] = {}

    def work(i: int) -> None:
        results[i] = sum(len(c) for c in coqui_engine.synthesize("Good morning. Good night."))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(n > 0 for n in results.values())


def test_it_needs_a_model():
    with pytest.raises(ValueError):
        CoquiEngine()
