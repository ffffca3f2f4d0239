"""audio.input.noise_reduction with the real denoisers (RNNoise, DeepFilterNet3) in the real input path."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines import audio
from pipelines.backends.deepfilternet import DeepFilterNetModel
from pipelines.backends.rnnoise import RnnoiseModel
from pipelines.input_audio import ATTENUATION_LIMIT_DB, InputAudio
from tests.support.speech import spoken, word_errors

SENTENCE = "Set a timer for twelve minutes and remind me to check the oven."
CHUNK_BYTES = 960  # 20 ms of 24 kHz PCM16


@pytest.fixture(scope="module", params=["rnnoise", "deepfilternet"])
def denoiser(request):
    return RnnoiseModel() if request.param == "rnnoise" else DeepFilterNetModel()


def stream(samples: np.ndarray, mode: str | None, model) -> np.ndarray:
    path = InputAudio(model)
    data = audio.encode(samples, audio.PCM)
    out = [path.process(data[at : at + CHUNK_BYTES], audio.PCM, mode) for at in range(0, len(data), CHUNK_BYTES)]
    out.append(path.flush())
    path.close()
    return np.concatenate(out)


def white_noise(seconds: float, level: float = 0.05) -> np.ndarray:
    return (level * np.random.default_rng(3).standard_normal(int(seconds * 24000))).astype(np.float32)


def db(samples: np.ndarray) -> float:
    return 10 * np.log10(np.mean(samples**2) + 1e-12)


def test_without_noise_reduction_the_path_only_resamples(denoiser):
    noise = white_noise(1.0)
    out = stream(noise, None, denoiser)
    reference = audio.StreamResampler(24000, 16000)
    pcm = audio.decode(audio.encode(noise, audio.PCM), audio.PCM)
    expected = np.concatenate([reference.process(pcm), reference.flush()])
    assert np.allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("mode", ["near_field", "far_field"])
def test_noise_alone_is_taken_down_and_the_stream_keeps_its_length(denoiser, mode):
    noise = white_noise(3.0)
    out = stream(noise, mode, denoiser)
    assert abs(len(out) - len(noise) * 2 // 3) <= 1600 * 4  # at most the denoiser's lag, pushed out by flush
    settled = out[16000:]  # after the first second
    drop = db(audio.resample(noise, 24000, 16000)[16000:]) - db(settled)
    cap = ATTENUATION_LIMIT_DB[mode]  # noise alone is taken down as far as the mode's cap allows, no further
    assert cap - 2 < drop < cap + 1, (mode, drop)


def test_near_and_far_field_are_the_same_light_touch(denoiser):
    noise = white_noise(3.0)
    near, far = (db(stream(noise, mode, denoiser)[16000:]) for mode in ("near_field", "far_field"))
    assert abs(far - near) < 0.5, (near, far)


def test_denoised_noisy_speech_still_says_the_words(denoiser, whisper_engine):
    speech = spoken(SENTENCE)
    noise = white_noise(len(speech) / 24000, level=float(np.sqrt(np.mean(speech**2))) / 3)  # about 10 dB SNR
    for mode in ("near_field", "far_field"):
        heard = whisper_engine.transcribe(stream(speech + noise, mode, denoiser), language="en")
        assert word_errors(heard, SENTENCE) <= 2, (mode, heard)


def test_a_session_turning_noise_reduction_on_mid_stream_gets_it_from_then_on(denoiser):
    path = InputAudio(denoiser)
    data = audio.encode(white_noise(2.0), audio.PCM)
    half = len(data) // 2
    before = np.concatenate(
        [path.process(data[at : at + CHUNK_BYTES], audio.PCM, None) for at in range(0, half, CHUNK_BYTES)]
    )
    after = np.concatenate(
        [
            path.process(data[at : at + CHUNK_BYTES], audio.PCM, "far_field")
            for at in range(half, len(data), CHUNK_BYTES)
        ]
    )
    path.close()
    assert db(before) - db(after[8000:]) > 4


@pytest.mark.parametrize("mode", [None, "far_field"])
def test_the_vad_stage_denoises_a_turn_only_when_the_session_asks(silero_model, mode):
    from dataclasses import replace

    from pipelines.config import SessionSettings, TurnDetection
    from pipelines.messages import AudioIn, CommitAudio, Utterance
    from pipelines.stages.base import SessionContext
    from pipelines.stages.vad import VadStage

    context = SessionContext()
    context.settings = replace(SessionSettings(), turn_detection=TurnDetection(type=None), noise_reduction=mode)
    stage = VadStage(
        context, silero_model, partial_every_ms=0, speculate_after_ms=0, min_interrupt_ms=0, denoiser=RnnoiseModel()
    )
    stage.setup()
    noise = white_noise(2.0)
    data = audio.encode(noise, audio.PCM)
    for at in range(0, len(data), CHUNK_BYTES):
        list(stage.process(AudioIn(generation=0, data=data[at : at + CHUNK_BYTES], audio_format=audio.PCM)))
    (utterance,) = [m for m in stage.process(CommitAudio(generation=0, item_id="item_1")) if isinstance(m, Utterance)]
    samples = np.frombuffer(utterance.samples, dtype=np.float32)
    assert abs(len(samples) - 32000) <= 2000  # the whole turn, flushed out of the filters and the denoiser
    drop = db(audio.resample(noise, 24000, 16000)) - db(samples[8000:])  # 16 kHz keeps 2/3 of white noise's band
    assert (drop > 4) if mode else (abs(drop) < 1), drop
