from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from pipelines.backends.faster_whisper_stt import WhisperEngine, default_model_path, packaged_model_path
from pipelines.config import DEFAULT_STT_MODEL
from tests.backends.conftest import QUESTION
from tests.support.services import missing
from tests.support.speech import word_errors


def test_the_default_model_is_the_packaged_folder_of_the_chosen_default():
    assert DEFAULT_STT_MODEL in ("tiny.en", "base")
    assert default_model_path() == packaged_model_path(DEFAULT_STT_MODEL)
    assert (Path(default_model_path()) / "model.bin").is_file()


def test_whisper_base_is_joined_from_its_packages_and_other_names_are_refused():
    folder = Path(packaged_model_path("base"))
    assert (folder / "model.bin").stat().st_size == 145217532
    assert {"config.json", "tokenizer.json", "vocabulary.txt"} <= {p.name for p in folder.iterdir()}
    assert (Path(packaged_model_path("tiny.en")) / "model.bin").is_file()
    with pytest.raises(FileNotFoundError):
        packaged_model_path("large-v3")


def test_whisper_base_by_its_packaged_name_is_multilingual_and_transcribes(question_audio_16k):
    engine = WhisperEngine("base", cpu_threads=2)
    assert engine.model_path == packaged_model_path("base") and engine.is_multilingual
    heard = engine.transcribe(question_audio_16k, language="en")
    assert word_errors(heard, QUESTION) <= 1, heard


def test_it_transcribes_speech_from_the_piper_voice(whisper_engine, question_audio_16k):
    heard = whisper_engine.transcribe(question_audio_16k, language="en")
    assert word_errors(heard, QUESTION) <= 1, heard


def test_it_returns_empty_text_for_empty_audio(whisper_engine):
    assert whisper_engine.transcribe(np.zeros(0, dtype=np.float32)) == ""


def test_it_accepts_a_prompt(whisper_engine, question_audio_16k):
    heard = whisper_engine.transcribe(question_audio_16k, prompt="Geography quiz.")
    assert word_errors(heard, QUESTION) <= 1, heard


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
    assert all(word_errors(heard, QUESTION) <= 1 for heard in results.values()), results


def test_a_short_question_is_encoded_in_the_short_window_and_heard_as_in_the_full_one(question_audio_16k):
    """The 10 s window (the default) and faster-whisper's 30 s one hear the same words; the full window is
    faster-whisper's own transcription."""
    short, full = WhisperEngine(cpu_threads=2), WhisperEngine(cpu_threads=2, window_s=30)
    assert short.window_frames == 1000 and short._frames(question_audio_16k) == 1000
    assert full.window_frames == 3000
    heard_short, heard_full = short.transcribe(question_audio_16k), full.transcribe(question_audio_16k)
    assert word_errors(heard_short, QUESTION) <= 1, heard_short
    assert word_errors(heard_full, QUESTION) <= 1, heard_full
    assert heard_full == full._full(question_audio_16k, None, None)


def test_an_utterance_longer_than_the_window_gets_a_window_a_second_longer_than_itself():
    engine = WhisperEngine(cpu_threads=1, window_s=3)
    assert engine._frames(np.zeros(16000 * 5, dtype=np.float32)) == 600
    assert engine._frames(np.zeros(16000 * 40, dtype=np.float32)) == 3000  # never more than Whisper's own


def test_a_transcript_that_says_its_last_words_twice_is_a_loop():
    from pipelines.backends.faster_whisper_stt import looping

    assert looping("What is the capital of France? What is the capital of France?")
    assert looping("Tell me the joke. Tell me the joke. Tell me the")
    assert not looping("What is the capital of France?")
    assert not looping("No, no, I meant the other one.")


def test_a_long_stretch_is_cut_in_its_pauses_into_pieces_no_longer_than_the_window():
    from pipelines.backends.faster_whisper_stt import quiet_cuts

    rate, word, pause = 16000, np.full(16000 // 2, 0.3, dtype=np.float32), np.zeros(16000 // 5, dtype=np.float32)
    sound = np.concatenate([np.concatenate([word, pause])] * 40)  # 0.7 s a word and its pause, 28 s
    pieces = quiet_cuts(sound, 10 * rate)
    assert len(pieces) >= 3 and all(piece.size <= 10 * rate for piece in pieces)
    assert np.array_equal(np.concatenate(pieces), sound)  # nothing lost, nothing twice
    for piece in pieces[:-1]:
        assert abs(piece[-1]) < 1e-6 and abs(piece[-rate // 40]) < 1e-6  # each cut falls in a pause, not a word
        assert piece.size >= 10 * rate * 2 // 3  # in the last third: pieces as long as the pauses allow


def test_a_phrase_is_translated_in_the_short_window_with_its_source_from_the_same_encoding(monkeypatch):
    """Whisper base's translate task on espeak-ng's Spanish, in the 10 s window (issue 55: a 2 s phrase's 30 s
    window cost seconds on a busy machine), the language detected on that encoding, the Spanish transcript decoded
    from it too; faster-whisper's own 30 s transcription is not asked."""
    import shutil
    import subprocess
    import tempfile

    import soundfile as sf

    from pipelines import audio

    if shutil.which("espeak-ng") is None:
        missing("espeak-ng is not installed (make system-deps)")  # a failure under CI=true
    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "phrase.wav"
        # Whisper base hears this phrase with a wide margin (language p=0.9); "El gato está en la casa." passed on
        # one machine and on another was heard as "El yachto" with the language at p=0.49, below the bar.
        spanish = "Buenos días, ¿dónde está el hospital?"
        subprocess.run(["espeak-ng", "-v", "es", "-s", "150", "-w", str(wav), spanish], check=True)
        samples, rate = sf.read(wav, dtype="float32")
    phrase = audio.resample(samples, rate, 16000)
    engine = WhisperEngine("base", cpu_threads=2)
    monkeypatch.setattr(engine._model, "transcribe", lambda *a, **k: pytest.fail("the 30 s window was used"))
    heard = engine.translate(phrase, with_source=True)
    assert heard.language == "es" and heard.probability > 0.5, heard
    assert {"morning", "hospital"} <= {w.strip(".,?").lower() for w in heard.text.split()}, heard
    assert "hospital" in heard.source.lower() and "días" in heard.source.lower(), heard
    assert engine.translate(phrase, language="es").text == heard.text  # the language given: not detected again
