from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines.backends.silero import FRAME_SAMPLES, default_model_path


def frames(audio: np.ndarray) -> list[np.ndarray]:
    n = len(audio) // FRAME_SAMPLES
    return [audio[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES] for i in range(n)]


def test_the_default_model_is_the_packaged_onnx_file():
    assert Path(default_model_path()).is_file()
    assert default_model_path().endswith("silero_vad.onnx")


def test_it_scores_speech_high_and_silence_low(silero_model, question_audio_16k):
    state = silero_model.new_state()
    speech = [state.prob(f) for f in frames(question_audio_16k)]
    state.reset()
    silence = [state.prob(f) for f in frames(np.zeros(16000, dtype=np.float32))]
    assert max(speech) > 0.8
    assert np.mean(speech) > 0.5
    assert max(silence) < 0.2


def test_sessions_keep_separate_state(silero_model, question_audio_16k):
    speech = frames(question_audio_16k)
    silence = frames(np.zeros(len(question_audio_16k), dtype=np.float32))
    alone = silero_model.new_state()
    expected = [alone.prob(f) for f in speech]

    a, b = silero_model.new_state(), silero_model.new_state()
    interleaved = []
    for s, q in zip(speech, silence):
        interleaved.append(a.prob(s))
        b.prob(q)
    assert interleaved == pytest.approx(expected, abs=1e-6)


def test_reset_forgets_the_past(silero_model, question_audio_16k):
    state = silero_model.new_state()
    first = [state.prob(f) for f in frames(question_audio_16k)[:10]]
    state.reset()
    again = [state.prob(f) for f in frames(question_audio_16k)[:10]]
    assert again == pytest.approx(first, abs=1e-6)


def test_it_rejects_a_frame_of_the_wrong_size(silero_model):
    with pytest.raises(ValueError):
        silero_model.new_state().prob(np.zeros(480, dtype=np.float32))
