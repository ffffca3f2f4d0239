"""The Kokoro voices (make kokoro) and the translation targets they give: which voices are offered and which
languages, the LM's translation of a phrase (its first line, a target already spoken passed through), a session
into Spanish spoken by the Spanish voice (fakes for the models), and the real Kokoro-82M speaking."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import numpy as np
import pytest

from pipelines import audio
from pipelines.backends import kokoro_tts
from pipelines.config import EngineConfig
from pipelines.kokoro_voices import installed_voices, language_of, offered_voices
from pipelines.loopback import FakeEnergyVad
from pipelines.translation import (
    Flushed,
    Heard,
    LiveTranslation,
    TranslatedAudio,
    TranslatedText,
    TranslationEngines,
    target_languages,
)
from pipelines.translation_targets import clean, prompt, translate_text


def voices_in(folder: Path, *names: str) -> Path:
    for name in names:
        (folder / f"{name}.bin").write_bytes(b"")
    return folder


def test_the_english_voices_installed_are_offered_by_name_unless_the_setting_says_otherwise(tmp_path):
    folder = voices_in(tmp_path, "af_heart", "am_michael", "bf_emma", "ef_dora", "jf_alpha", "zf_xiaobei")
    assert installed_voices(folder) == ("af_heart", "am_michael", "bf_emma", "ef_dora")  # no Japanese, Mandarin
    assert offered_voices(("english",), folder) == ("af_heart", "am_michael", "bf_emma")
    assert offered_voices(("all",), folder) == ("af_heart", "am_michael", "bf_emma", "ef_dora")
    assert offered_voices(("off",), folder) == ()
    assert offered_voices(("english",), tmp_path / "absent") == ()
    config = EngineConfig(kokoro_voices_dir=str(folder))
    assert config.all_voices[-3:] == ("af_heart", "am_michael", "bf_emma") and "alloy" in config.all_voices
    assert config.voice_table()["af_heart"] == "Kokoro af_heart"
    assert config.voice_notes()[-1] == "Kokoro-82M plays 3 voices by their names: af_heart, am_michael, bf_emma"
    assert language_of("pf_dora") == "pt" and language_of("bm_george") == "en"
    with pytest.raises(ValueError):
        language_of("jf_alpha")


def test_a_target_language_is_offered_where_its_voice_is_installed(tmp_path):
    assert target_languages(str(tmp_path)) == ("en",)
    voices_in(tmp_path, "ef_dora", "if_sara", "hf_alpha")
    assert target_languages(str(tmp_path)) == ("en", "es", "it")


class Answers:
    """A fake LM streaming one answer a piece at a time; it notes whether it was told to stop and the prompt."""

    context_length = 4096

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.messages: list[dict] = []
        self.stopped_after: int | None = None

    def count_tokens(self, messages, tools=()) -> int:
        return 0

    def generate_stream(self, messages, max_new_tokens, temperature, cancel=None, **_options):
        self.messages = messages
        for n, piece in enumerate(self.pieces):
            if cancel is not None and cancel.is_set():
                self.stopped_after = n
                return
            yield piece


def test_the_lm_translation_is_its_first_line_and_stops_there():
    lm = Answers(["«El gato", " está en la casa.»", "\n", "Note: this", " is Spanish."])
    assert translate_text(lm, "The cat is in the house.", "en", "es") == "El gato está en la casa."
    assert lm.stopped_after == 3  # the generation stopped at the token after the line
    system, example, answer, user = lm.messages
    assert "English" in system["content"] and "Spanish" in system["content"]
    assert example["content"].startswith("Where is") and answer["content"].startswith("¿Dónde")
    assert user == {"role": "user", "content": "The cat is in the house."}
    assert translate_text(Answers(["never"]), "Hola amigo.", "es", "es") == "Hola amigo."  # already the target
    assert clean('"Bonjour."\nmore') == "Bonjour."
    assert len(prompt("x", "de", "es")) == 2  # no worked example for a source without one


class Tone:
    """A fake voice: a tone of 0.1 s per word, at 24 kHz."""

    sample_rate = 24000

    def __init__(self) -> None:
        self.said: list[str] = []

    def synthesize(self, text, cancel=None, speed=1.0):
        self.said.append(text)
        yield np.full(2400 * len(text.split()), 0.1, dtype=np.float32)


class Hearer:
    """A fake Whisper: hears English; translates into English for the English target."""

    def translate(self, samples, with_source=False, language=None) -> Heard:
        return Heard("en", "the cat" if with_source else "", "the cat")

    def hear(self, samples, language=None) -> Heard:
        return Heard("en", "The cat is in the house.", "")


def test_a_session_into_spanish_is_translated_by_the_lm_and_spoken_by_the_spanish_voice():
    english, spanish = Tone(), Tone()
    lm = Answers(["El gato está en la casa."])
    engines = TranslationEngines(FakeEnergyVad(), Hearer(), english, None, lm, {"es": spanish}, ("en", "es"))
    out: queue.SimpleQueue = queue.SimpleQueue()
    translation = LiveTranslation(engines, out.put)
    translation.target = "es"
    loud = np.full(24000, 0.3, dtype=np.float32)
    translation.feed(audio.encode(np.concatenate([loud, np.zeros(24000, dtype=np.float32)]), audio.PCM))
    translation.flush()
    seen = []
    while not isinstance(item := out.get(timeout=10), Flushed):
        seen.append(item)
    translation.close()
    assert [i.text for i in seen if isinstance(i, TranslatedText)] == ["El gato está en la casa. "]
    assert any(isinstance(i, TranslatedAudio) for i in seen)
    assert spanish.said == ["El gato está en la casa."] and english.said == []


@pytest.fixture(scope="module")
def kokoro():
    assert "af_heart" in installed_voices(), "install Kokoro: make kokoro"
    model = kokoro_tts.KokoroModel(threads=2)
    model.load()
    return model


def test_one_kokoro_model_speaks_each_voice_a_sentence_at_a_time(kokoro):
    heart, dora = kokoro.voice("af_heart"), kokoro.voice("ef_dora")
    chunks = list(heart.synthesize("Hello there. How are you?"))
    assert len(chunks) == 2 and all(c.dtype == np.float32 and len(c) > 2400 for c in chunks)
    assert np.abs(chunks[0][:480]).max() >= 0.001  # the voice starts within 20 ms: the lead near-silence cut
    spanish = np.concatenate(list(dora.synthesize("Hola, amigo.")))
    assert len(spanish) > 0.3 * kokoro_tts.SAMPLE_RATE
    assert dora.model is heart.model  # one model, two voices
    stop = threading.Event()
    stop.set()
    assert list(heart.synthesize("Not said.", stop)) == []


def test_a_long_sentence_is_cut_at_its_clauses_to_fit_the_model(kokoro):
    voice = kokoro.voice("af_heart")
    long = ", ".join(["the quick brown fox jumps over the lazy dog"] * 16) + "."
    pieces = voice.phonemes(long)
    assert len(pieces) > 1 and all(len(p) <= kokoro_tts.MAX_TOKENS for p in pieces)


def test_the_pool_plays_each_kokoro_name_on_one_model_beside_the_piper_voice(kokoro):
    from pipelines.engines import _voices

    voices = _voices(EngineConfig(), "cpu", {})
    heart, michael = voices["af_heart"], voices["am_michael"]
    assert isinstance(heart, kokoro_tts.KokoroVoice) and isinstance(michael, kokoro_tts.KokoroVoice)
    assert heart.model is michael.model  # one model loaded for every Kokoro name
    assert not isinstance(voices["alloy"], kokoro_tts.KokoroVoice)  # the OpenAI names keep the Piper voice
    assert "ef_dora" not in voices  # the English voices only, by default
