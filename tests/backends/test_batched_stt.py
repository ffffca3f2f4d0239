"""Batched Whisper transcription with the packaged tiny.en model and Piper speech."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pipelines.backends.batched_stt import BatchedTranscriber
from tests.backends.conftest import resample

SENTENCES = ["What is the capital of France?", "How many legs does a spider have?", "Name a fruit that is yellow."]


@pytest.fixture(scope="module")
def utterances(piper_engine) -> list[np.ndarray]:
    return [
        resample(np.concatenate(list(piper_engine.synthesize(s))), piper_engine.sample_rate, 16000) for s in SENTENCES
    ]


def test_a_batch_gives_the_same_texts_as_one_call_each(whisper_engine, utterances):
    alone = [whisper_engine.transcribe(u) for u in utterances]
    assert whisper_engine.transcribe_batch(utterances) == alone
    assert "spider" in alone[1].lower()


def test_a_batch_with_a_prompt_and_empty_audio(whisper_engine, utterances):
    texts = whisper_engine.transcribe_batch([utterances[0], np.zeros(0, dtype=np.float32)], prompt="Geography quiz.")
    assert texts[0] == whisper_engine.transcribe(utterances[0], prompt="Geography quiz.")
    assert texts[1] == ""


def test_utterances_ending_together_share_one_call_and_each_caller_gets_its_own_text(whisper_engine, utterances):
    alone = [whisper_engine.transcribe(u) for u in utterances]
    batched = BatchedTranscriber(whisper_engine, window_ms=500, max_batch=8)
    texts = [""] * len(utterances)
    start = threading.Barrier(len(utterances))

    def speak(i: int) -> None:
        start.wait(timeout=30)
        texts[i] = batched.transcribe(utterances[i])

    threads = [threading.Thread(target=speak, args=(i,)) for i in range(len(utterances))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    batched.close()
    assert texts == alone
    assert batched.stats()["utterances"] == len(utterances)
    assert batched.stats()["calls"] < len(utterances)


def test_different_prompts_are_transcribed_in_separate_groups(whisper_engine, utterances):
    batched = BatchedTranscriber(whisper_engine, window_ms=300)
    texts: dict[str, str] = {}
    threads = [
        threading.Thread(target=lambda p=p: texts.__setitem__(p, batched.transcribe(utterances[0], prompt=p)))
        for p in ("Geography quiz.", "Cooking show.")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    batched.close()
    assert texts["Geography quiz."] == whisper_engine.transcribe(utterances[0], prompt="Geography quiz.")
    assert texts["Cooking show."] == whisper_engine.transcribe(utterances[0], prompt="Cooking show.")
