from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from pipelines.backends.faster_whisper_stt import default_model_path


def test_the_default_model_is_the_packaged_folder():
    assert (Path(default_model_path()) / "model.bin").is_file()


def test_it_transcribes_speech_from_the_piper_voice(whisper_engine, question_audio_16k):
    text = whisper_engine.transcribe(question_audio_16k, language="en").lower()
    assert "capital" in text
    assert "france" in text


def test_it_returns_empty_text_for_empty_audio(whisper_engine):
    assert whisper_engine.transcribe(np.zeros(0, dtype=np.float32)) == ""


def test_it_accepts_a_prompt(whisper_engine, question_audio_16k):
    text = whisper_engine.transcribe(question_audio_16k, prompt="Geography quiz.")
    assert "france" in text.lower()


def test_two_threads_can_transcribe_at_once(whisper_engine, question_audio_16k):
    results: dict[int, str] = {}

    def work(i: int) -> None:
        results[i] = whisper_engine.transcribe(question_audio_16k)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2
    assert all("france" in r.lower() for r in results.values())
