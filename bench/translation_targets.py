"""Translation into the Kokoro targets (Spanish, French, Italian, Portuguese): each step's time and the words' accuracy.

For a target other than English a phrase goes through three models (``pipelines/translation.py``): Whisper base
transcribes it in the speaker's language, the packaged LM translates the transcript, and the target's Kokoro voice
speaks it. This runs English phrases (spoken by the packaged Piper voice, as the tests' speech is) through those
steps as a session does and reports, per target: the time from the phrase's end to its first translated audio
(Whisper, then the LM, then Kokoro's first chunk; the VAD's 400 ms pause before a phrase counts as ended is not
included), the share of the expected words (a word or its alternatives) in the LM's translation, and the share of
those found again when Whisper base hears the Kokoro voice back in the target language.

Run: ``python bench/translation_targets.py`` (``--help``, needs ``make kokoro``); prints markdown and rewrites its
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, pct, write_section  # noqa: E402
from bench.kokoro_voices import cpu_name  # noqa: E402
from pipelines import audio  # noqa: E402
from pipelines.translation_targets import VOICES, language_name, translate_text  # noqa: E402

BEGIN, END = "<!-- translation_targets:begin -->", "<!-- translation_targets:end -->"
# English phrases and, per target, the words a translation must hold ("a|b": either).
PHRASES: list[tuple[str, dict[str, list[str]]]] = [
    (
        "The cat is in the house.",
        {"es": ["gato", "casa"], "fr": ["chat", "maison"], "it": ["gatto", "casa"], "pt": ["gato", "casa"]},
    ),
    (
        "I have a black dog.",
        {"es": ["perro", "negro"], "fr": ["chien", "noir"], "it": ["cane", "nero"], "pt": ["cachorro|cão", "preto"]},
    ),
    (
        "Where is the hospital?",
        {
            "es": ["dónde", "hospital"],
            "fr": ["où", "hôpital"],
            "it": ["dove|dov", "ospedale"],
            "pt": ["onde", "hospital"],
        },
    ),
    (
        "The water is cold.",
        {"es": ["agua", "fría"], "fr": ["eau", "froide"], "it": ["acqua", "fredda"], "pt": ["água", "fria"]},
    ),
    (
        "My brother works in the city.",
        {
            "es": ["hermano", "trabaja", "ciudad"],
            "fr": ["frère", "travaille", "ville"],
            "it": ["fratello", "lavora", "città"],
            "pt": ["irmão", "trabalha", "cidade"],
        },
    ),
]


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def found(expected: list[str], text: str) -> list[bool]:
    heard = words(text)
    return [any(alternative in heard for alternative in word.split("|")) for word in expected]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(VOICES))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from pipelines.backends import registry
    from pipelines.backends.faster_whisper_stt import WhisperEngine
    from pipelines.config import EngineConfig
    from tests.support.speech import spoken

    cores = os.cpu_count() or 1
    config = EngineConfig()
    whisper = WhisperEngine("base", cpu_threads=cores)
    lm = registry.load(registry.LM_BACKENDS, "LM", config.lm_backend, config, registry.Needs("cpu", cores, 1))
    model = registry.kokoro_model(config.kokoro_model_dir, config.kokoro_voices_dir)
    model.load()
    translate_text(lm, "Hello.", "en", "es")  # warm, as the pool's warm-up turn warms the LM before sessions come
    rows = [
        "| target (voice) | phrases | end to first audio p50 | p95 | Whisper / LM / Kokoro p50 | words in the LM's "
        "translation | of those, heard back |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    examples: list[str] = []
    for target in args.targets.split(","):
        voice = model.voice(VOICES[target])
        totals, steps, right, expected_n, back, back_n = [], [], 0, 0, 0, 0
        for english, expected in PHRASES:
            samples = audio.resample(spoken(english), 24000, audio.PIPELINE_RATE)
            started = time.perf_counter()
            heard = whisper.hear(samples)
            heard_at = time.perf_counter()
            text = translate_text(lm, heard.source, heard.language, target)
            translated_at = time.perf_counter()
            chunks = iter(voice.synthesize(text))
            first = next(chunks, np.zeros(0, dtype=np.float32))
            spoke_at = time.perf_counter()
            totals.append((spoke_at - started) * 1000)
            steps.append((heard_at - started, translated_at - heard_at, spoke_at - translated_at))
            speech = np.concatenate([first, *chunks])
            said = found(expected[target], text)
            right, expected_n = right + sum(said), expected_n + len(said)
            again = whisper.hear(audio.resample(speech, voice.sample_rate, audio.PIPELINE_RATE), target).source
            back += sum(s and a for s, a in zip(said, found(expected[target], again)))
            back_n += sum(said)
            examples.append(f"| {language_name(target)} | {heard.source} | {text} | {again} |")
        whisper_s, lm_s, kokoro_s = (pct([s[i] for s in steps], 50) for i in range(3))
        rows.append(
            f"| {language_name(target)} ({VOICES[target]}) | {len(PHRASES)} | {pct(totals, 50):.0f} ms "
            f"| {pct(totals, 95):.0f} ms | {whisper_s:.1f} / {lm_s:.1f} / {kokoro_s:.1f} s "
            f"| {right}/{expected_n} | {back}/{back_n} |"
        )
    command = "python bench/translation_targets.py " + shlex.join(sys.argv[1:])
    text = f"""{BEGIN}
## Translation into the Kokoro targets (`bench/translation_targets.py`)

`{command.strip()}` on {dt.date.today().isoformat()}: {cpu_name()}, {cores} CPUs, no GPU; {len(PHRASES)} English
phrases spoken by the Piper voice, each through Whisper base (transcribed in its language), the packaged LM
(Qwen2.5-Coder-0.5B, greedy, one worked example in the prompt) and the target's Kokoro voice, one step after the
other as a session runs them; the time from the phrase's end to its first translated audio leaves out the VAD's
400 ms pause; the words: the expected words of each phrase found in the LM's translation, and of those, the ones
Whisper base hears again in the Kokoro voice (in the target language); {machine_load(os.getloadavg()[0])}.

{chr(10).join(rows)}

What each step gave:

| target | Whisper heard | the LM's translation | Whisper heard the Kokoro voice say |
|---|---|---|---|
{chr(10).join(examples)}
{END}"""
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
