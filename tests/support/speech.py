"""Test speech made at test time, and audio helpers for the tests."""

from __future__ import annotations

import base64
import difflib
import functools

import numpy as np

from pipelines import audio
from pipelines.spoken import for_speech


def tone(seconds: float, rate: int = 24000, freq: float = 220.0, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def silence(seconds: float, rate: int = 24000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)


def pcm16_chunks(samples: np.ndarray, chunk_ms: int = 20, rate: int = 24000) -> list[str]:
    """24 kHz float samples -> base64 PCM16 chunks, as ``input_audio_buffer.append`` carries them."""
    data = audio.encode(samples, audio.PCM)
    step = rate * chunk_ms // 1000 * 2
    return [base64.b64encode(data[i : i + step]).decode() for i in range(0, len(data), step)]


@functools.lru_cache(maxsize=32)
def spoken(text: str, rate: int = 24000, steady: bool = True) -> np.ndarray:
    """``text`` spoken by the packaged Piper voice, float32 at ``rate``.

    ``steady``: without Piper's random variation, the same audio every run, so that a test's check
    of what Whisper hears cannot pass or fail by the voice's chance. The benchmarks ask for varied
    renderings (``steady=False``, a new one after ``spoken.cache_clear()``).
    """
    voice = _aligned_piper()
    samples = np.concatenate(
        [c.audio_float_array for c in voice.synthesize(text, syn_config=_steady() if steady else None)]
    )
    return audio.resample(samples.astype(np.float32), voice.config.sample_rate, rate)


@functools.lru_cache(maxsize=32)
def spoken_halves(text: str, rate: int = 24000, steady: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``text`` spoken as one sentence, cut at its ``|`` (a word boundary): the two halves, float32 at ``rate``.

    Both halves come from one synthesis, so the first keeps the pitch of a sentence that goes on;
    a pause put between them is a pause in mid-sentence. ``steady``: without Piper's random
    variation, the same audio every run (as :func:`spoken`). The cut is found from Piper's phoneme
    alignments (the word boundary after as many spaces as the part before the ``|`` has, phonemized alone).
    """
    before, _, after = text.partition("|")
    if not after:
        raise ValueError("mark the pause with '|'")
    voice = _aligned_piper()
    (chunk,) = list(
        voice.synthesize(
            f"{before.strip()} {after.strip()}", syn_config=_steady() if steady else None, include_alignments=True
        )
    )
    if chunk.phoneme_alignments is None:
        raise RuntimeError("the Piper voice gave no alignments")
    # The words as espeak speaks them: it runs some together ("for a" is one, "fɚɹɚ"), so the cut comes after
    # as many of its word breaks as the first part alone has.
    words, seen, cut = sum(phonemes.count(" ") + 1 for phonemes in voice.phonemize(before.strip())), 0, 0
    for alignment in chunk.phoneme_alignments:
        if alignment.phoneme == " ":
            seen += 1
            if seen == words:
                break
        cut += alignment.num_samples
    samples = np.asarray(chunk.audio_float_array, dtype=np.float32)
    first, second = samples[:cut], samples[cut:]
    return audio.resample(first, chunk.sample_rate, rate), audio.resample(second, chunk.sample_rate, rate)


@functools.lru_cache(maxsize=1)
def _aligned_piper():
    """The packaged Piper voice, patched in memory to report phoneme alignments (needs ``onnx``)."""
    from piper import PiperVoice

    from pipelines.backends.piper_tts import default_voice_path

    return PiperVoice.load(default_voice_path(), include_alignments=True)


def _steady():
    from piper import SynthesisConfig

    return SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)


def spoken_words(text: str) -> list[str]:
    """The words of a transcript as said: the digits Whisper writes ("4", "7") as the words the voice reads them
    as (:func:`pipelines.spoken.for_speech`), case, punctuation and apostrophes dropped."""
    said = for_speech(text).lower().replace("'", "").replace("\u2019", "")
    return "".join(c if c.isalnum() else " " for c in said).split()


def word_errors(heard: str, said: str) -> int:
    """Words substituted, dropped or added between what was said and what was heard: the numerator of a word
    error rate."""
    return edit_distance(spoken_words(said), spoken_words(heard))


def spelled_alike(heard: str, said: str) -> float:
    """How alike the letters of two transcripts are, 0 to 1, spaces left out: Whisper tiny.en hearing "France
    is" as "Francis" costs two words but two letters. Unrelated sentences score about 0.2-0.3."""
    return difflib.SequenceMatcher(None, "".join(spoken_words(said)), "".join(spoken_words(heard))).ratio()


def edit_distance(said: list[str], heard: list[str]) -> int:
    """Levenshtein distance between two word lists: substitutions, deletions and insertions."""
    row = list(range(len(heard) + 1))
    for i, word in enumerate(said, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(heard, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (word != other))
    return row[-1]
