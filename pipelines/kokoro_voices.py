"""Which Kokoro voices are installed (``make kokoro``), and the language each speaks, read from the voice files alone.

The settings read it to offer the voices by name, and the translation sessions to offer their languages, before any
model loads; the engine that plays them is ``pipelines/backends/kokoro_tts.py``.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

# The language a Kokoro voice speaks, by the first letter of its name (Kokoro's naming: af_heart is American English,
# ef_dora Spanish). Not j (Japanese) or z (Mandarin): Kokoro reads them with phonemizers of their own (OpenJTalk,
# pinyin), and espeak-ng, the phonemizer here, reads kanji as their Unicode names.
LANGUAGES = {"a": "en", "b": "en", "e": "es", "f": "fr", "h": "hi", "i": "it", "p": "pt"}


def default_voices_dir() -> Path:
    """Where ``make kokoro`` puts the voice files: inside the virtual environment."""
    return Path(sys.prefix) / "share" / "kokoro-js" / "voices"


def installed_voices(voices_dir: str | Path | None = None) -> tuple[str, ...]:
    """The voices in ``voices_dir`` (None: the default) whose language is offered, sorted; none when absent."""
    folder = Path(voices_dir) if voices_dir else default_voices_dir()
    if not folder.is_dir():
        return ()
    return tuple(sorted(p.stem for p in folder.glob("*.bin") if p.stem[:1] in LANGUAGES))


@functools.lru_cache(maxsize=8)
def offered_voices(setting: tuple[str, ...], voices_dir: str | Path | None = None) -> tuple[str, ...]:
    """The Kokoro voices offered by name (``S2S_KOKORO_VOICES``): ``english`` (the default) the English ones
    installed, ``all`` every one installed, ``off`` none, or the names given (checked when the pool loads)."""
    if setting in (("english",), ("all",)):
        installed = installed_voices(voices_dir)
        return installed if setting == ("all",) else tuple(v for v in installed if LANGUAGES[v[0]] == "en")
    return () if setting == ("off",) else setting


def language_of(voice: str) -> str:
    """The language ``voice`` speaks (ISO 639-1), by its name."""
    language = LANGUAGES.get(voice[:1])
    if language is None:
        raise ValueError(f"{voice!r} is not a Kokoro voice this server speaks ({', '.join(sorted(LANGUAGES))}_...)")
    return language
