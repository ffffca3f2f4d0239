"""The languages a translation session may ask for besides English, and how a phrase is put into one.

English comes from Whisper's translate task and the pool's voice (``pipelines/translation.py``). Another language
comes from the LM, which translates the phrase's transcript in its own language, and a Kokoro voice of that language
speaks it (``make kokoro``): a language is offered only where its voice is installed. Japanese and Mandarin have
Kokoro voices, but espeak-ng, the phonemizer here, cannot read them (``pipelines/backends/kokoro_tts.py``).
"""

from __future__ import annotations

from pathlib import Path

from pipelines.interfaces import Cancel, LanguageModel
from pipelines.kokoro_voices import installed_voices

# The Kokoro voice that speaks each language (its first letter says the language: pipelines/backends/kokoro_tts.py).
# Not Hindi: its voices speak it (Whisper hears hf_alpha back), but the packaged 0.5B LM does not write it (five
# sentences of five came out as other words or left in English).
VOICES = {"es": "ef_dora", "fr": "ff_siwis", "it": "if_sara", "pt": "pf_dora"}
NAMES = {
    "en": "English",
    "es": "Spanish",
    "fr": "French",
    "it": "Italian",
    "pt": "Brazilian Portuguese",
    "hi": "Hindi",
}
# One worked example per language, shown to the LM before the phrase: without it the packaged 0.5B model now and
# then answers a question ("Where is the hospital?") instead of translating it.
EXAMPLE = "Where is the train station? I am tired."
EXAMPLES = {
    "en": EXAMPLE,
    "es": "¿Dónde está la estación de tren? Estoy cansado.",
    "fr": "Où est la gare ? Je suis fatigué.",
    "it": "Dov'è la stazione dei treni? Sono stanco.",
    "pt": "Onde fica a estação de trem? Estou cansado.",
    "hi": "ट्रेन स्टेशन कहाँ है? मैं थका हुआ हूँ।",
}
MAX_TOKENS = 160  # of one phrase's translation: a phrase is a few seconds of speech (PHRASE_MAX_S at most)


def kokoro_targets(voices_dir: str | Path | None = None) -> dict[str, str]:
    """Each language of VOICES whose voice is installed in ``voices_dir`` (None: where make kokoro puts them),
    and that voice."""
    installed = set(installed_voices(voices_dir))
    return {language: voice for language, voice in VOICES.items() if voice in installed}


def language_name(code: str) -> str:
    """``code``'s language in English words, for the LM (an unknown code stays as it is)."""
    return NAMES.get(code.split("-")[0], code)


def prompt(text: str, source: str, target: str) -> list[dict[str, str]]:
    """The messages asking the LM to put ``text`` (in language ``source``) into ``target``."""
    system = (
        f"Translate the user's {language_name(source)} text into {language_name(target)}. "
        "Reply with the translation only."
    )
    messages = [{"role": "system", "content": system}]
    source, target = source.split("-")[0], target.split("-")[0]
    if source in EXAMPLES and target in EXAMPLES:
        messages += [{"role": "user", "content": EXAMPLES[source]}, {"role": "assistant", "content": EXAMPLES[target]}]
    return [*messages, {"role": "user", "content": text}]


class _Until:
    """A generation's cancel: the caller's, or set once the answer's first line is complete."""

    def __init__(self, cancel: Cancel | None) -> None:
        self.cancel = cancel
        self.done = False

    def is_set(self) -> bool:
        return self.done or (self.cancel is not None and self.cancel.is_set())


def translate_text(lm: LanguageModel, text: str, source: str, target: str, cancel: Cancel | None = None) -> str:
    """``text`` put into ``target`` by ``lm`` (greedy), its first line only; as it is when it is in ``target``
    already."""
    if not text.strip() or source.split("-")[0] == target.split("-")[0]:
        return text.strip()
    until = _Until(cancel)
    answer = ""
    for piece in lm.generate_stream(prompt(text, source, target), MAX_TOKENS, 0.0, until):
        answer += piece
        until.done = until.done or "\n" in answer.lstrip()  # the generation then stops at its next token
    return clean(answer)


def clean(answer: str) -> str:
    """The translation in the LM's answer: its first line, without the quotes a small model may put around it."""
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return first.strip("\"'“”«»").strip()
