"""Smart Turn v3 on real Piper speech: finished and unfinished sentences, loading errors, threads."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import numpy as np
import pytest

from pipelines import audio
from pipelines.backends.silero import default_model_path as silero_path
from pipelines.backends.smart_turn import WINDOW_SAMPLES, SmartTurnModel, default_model_path, last_window
from pipelines.errors import ModelLoadError
from tests.support.speech import spoken, spoken_halves

pytestmark = pytest.mark.real_models

# The pause the VAD stage leaves before it asks the model, as audio.
PAUSE = np.zeros(audio.PIPELINE_RATE // 4, dtype=np.float32)


@pytest.fixture(scope="module")
def smart_turn() -> SmartTurnModel:
    return SmartTurnModel()


def at_16k(samples: np.ndarray) -> np.ndarray:
    return audio.resample(samples, 24000, audio.PIPELINE_RATE)


def test_the_default_model_is_the_onnx_file_of_the_pipecat_wheel():
    path = Path(default_model_path())
    assert path.is_file() and path.name == "smart-turn-v3.2-cpu.onnx"
    assert "pipecat" in path.parts


def test_a_finished_question_reads_as_finished(smart_turn):
    for text in ("What time does the store close?", "What is the capital of France?"):
        assert smart_turn.probability(np.concatenate([at_16k(spoken(text)), PAUSE])) > 0.8, text


def test_a_sentence_cut_in_the_middle_reads_as_unfinished(smart_turn):
    first, _ = spoken_halves("My phone number is five five five | two three four nine.", steady=True)
    assert smart_turn.probability(np.concatenate([at_16k(first), PAUSE])) < 0.2


def test_the_window_is_the_last_eight_seconds_padded_on_the_left():
    short = np.ones(16000, dtype=np.float32)
    window = last_window(short)
    assert len(window) == WINDOW_SAMPLES and not window[:-16000].any() and window[-16000:].all()
    long = np.arange(WINDOW_SAMPLES + 5, dtype=np.float32)
    assert np.array_equal(last_window(long), long[5:])


def test_threads_share_the_model_and_get_what_one_thread_gets(smart_turn):
    inputs = [np.concatenate([at_16k(spoken(text)), PAUSE]) for text in ("Tell me a joke.", "Why is the sky blue?")]
    inputs.append(
        np.concatenate(
            [at_16k(spoken_halves("I want to fly from London to | Paris next Friday.", steady=True)[0]), PAUSE]
        )
    )
    alone = [smart_turn.probability(x) for x in inputs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(smart_turn.probability, inputs * 2))
    assert together == pytest.approx(alone * 2, abs=1e-5)


def test_a_missing_model_file_is_a_clear_load_error(tmp_path):
    missing = tmp_path / "no-such-smart-turn.onnx"
    with pytest.raises(
        ModelLoadError, match="Smart Turn model not found at .*no-such-smart-turn.onnx.*S2S_SMART_TURN_MODEL"
    ):
        SmartTurnModel(str(missing))


def test_another_onnx_model_is_refused_by_name():
    with pytest.raises(ModelLoadError, match="is not a Smart Turn v3 model"):
        SmartTurnModel(silero_path())
