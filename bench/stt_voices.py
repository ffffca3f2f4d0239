"""What is heard: Whisper tiny.en against Whisper base on varied speech, in one run.

The quality bench (``bench/quality.py``) hears its questions in one voice, the packaged Piper voice, so
its word error rate says little of other talkers: every client heard a held-back espeak question about
farm animals as "Please aim free animals..." with tiny.en. This renders the questions of
``bench/quality_questions.py`` in several voices: espeak-ng (``en-us``, ``en-gb``, ``en-us+f3``, at
140, 175 and 210 words a minute, one speed per question and voice, rotating) and the packaged Piper voice
(length scales 0.85, 1.0, 1.2, rotating), a third of them again with white noise at 10 dB SNR; and two
farm-animal questions spoken by every espeak voice at every speed. Each utterance (16 kHz mono, 0.3 s of
silence before and 0.1 s after) goes to every model in turn through the server's own ``WhisperEngine``,
built as ``pipelines/engines.py`` builds it (the default encoder window, the threads one call gets from
a default server, no language: what a session that sets none sends), the order rotating per utterance so
that the machine's load falls on all alike. ``base:en`` is base told the language, as a client that sets
``input_audio_transcription.language`` has it.

Needs ``espeak-ng`` (Debian: ``apt-get install espeak-ng``). Run: ``python bench/stt_voices.py`` (``--help``);
prints markdown and rewrites its section of docs/benchmarks.md (``--no-write`` only prints).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, pct, write_section  # noqa: E402
from bench.quality import RATES, piper_speech, piper_voice, with_noise, words  # noqa: E402
from bench.quality_questions import QUESTIONS  # noqa: E402
from pipelines import audio  # noqa: E402
from pipelines.backends.faster_whisper_stt import WhisperEngine  # noqa: E402
from pipelines.config import ENGINE_DEFAULTS, POOL_DEFAULTS  # noqa: E402
from pipelines.engines import compute_threads  # noqa: E402
from tests.support.speech import edit_distance  # noqa: E402

BEGIN, END = "<!-- stt_voices:begin -->", "<!-- stt_voices:end -->"
SPEAKERS = ("en-us", "en-gb", "en-us+f3")  # espeak-ng voices: American, British, American with a female variant
SPEEDS = (140, 175, 210)  # espeak-ng words a minute (its default is 175)
FARM = ("Which farm animals give us milk, eggs and wool?", "Please name three farm animals.")
BEFORE_S, AFTER_S = 0.3, 0.1  # silence around the speech, as the server's VAD hands a turn over


@dataclass(frozen=True)
class Utterance:
    text: str
    family: str  # "espeak" or "Piper"
    voice: str  # espeak's voice, or Piper's
    speed: str  # "175 wpm", "length 1.0"
    noisy: bool
    audio: np.ndarray  # float32, 16 kHz

    @property
    def label(self) -> str:
        return f"{self.family} {self.voice}, {self.speed}" + (", noisy" if self.noisy else "")


@dataclass
class Heard:
    text: str
    errors: int
    words: int
    ms: float


@dataclass
class Results:
    utterances: list[Utterance]
    heard: dict[str, list[Heard]] = field(default_factory=dict)  # model -> one per utterance


# --- speech ------------------------------------------------------------------


def espeak(text: str, voice: str, speed: int) -> np.ndarray:
    """``text`` spoken by espeak-ng's ``voice`` at ``speed`` words a minute, float32 at 16 kHz."""
    with tempfile.TemporaryDirectory(prefix="s2s-espeak-") as folder:
        path = Path(folder) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(path), text], check=True, timeout=60)
        with wave.open(str(path)) as wav:
            rate, data = wav.getframerate(), wav.readframes(wav.getnframes())
    samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768
    return audio.resample(samples, rate, 16000)


def padded(speech: np.ndarray) -> np.ndarray:
    return np.concatenate(
        [np.zeros(int(BEFORE_S * 16000), np.float32), speech, np.zeros(int(AFTER_S * 16000), np.float32)]
    )


def renderings(questions: list[str]) -> list[Utterance]:
    """The questions in every voice at one rotating speed, a third also noisy; the farm questions at every speed."""
    rng = np.random.default_rng(7)
    piper = piper_voice()
    out: list[Utterance] = []

    def add(text: str, family: str, voice: str, speed: str, speech: np.ndarray, noisy: bool) -> None:
        out.append(Utterance(text, family, voice, speed, False, padded(speech)))
        if noisy:
            out.append(Utterance(text, family, voice, speed, True, padded(with_noise(speech, rng))))

    for i, text in enumerate(questions):
        for j, speaker in enumerate(SPEAKERS):
            speed = SPEEDS[(i + j) % len(SPEEDS)]
            add(text, "espeak", speaker, f"{speed} wpm", espeak(text, speaker, speed), (i // 3 + j) % 3 == 0)
        scale = RATES[i % len(RATES)]
        add(text, "Piper", "joe", f"length {scale}", piper_speech(piper, text, scale), (i // 3) % 3 == 0)
    for text in FARM:
        for speaker in SPEAKERS:
            for speed in SPEEDS:
                add(text, "espeak", speaker, f"{speed} wpm", espeak(text, speaker, speed), speed == 175)
        for scale in RATES:
            add(text, "Piper", "joe", f"length {scale}", piper_speech(piper, text, scale), False)
    return out


# --- hearing -----------------------------------------------------------------


def engines(models: list[str], threads: int) -> dict[str, tuple[WhisperEngine, str | None]]:
    """Each model (``name`` or ``name:language``) as the server loads it (pipelines/engines.py), one per name."""
    loaded: dict[str, WhisperEngine] = {}
    out: dict[str, tuple[WhisperEngine, str | None]] = {}
    for model in models:
        name, _, language = model.partition(":")
        if name not in loaded:
            loaded[name] = WhisperEngine(
                name,
                device="cpu",
                cpu_threads=threads,
                num_workers=2 * POOL_DEFAULTS.size,
                window_s=ENGINE_DEFAULTS.stt_window_s,
            )
        out[model] = (loaded[name], language or None)
    return out


def hear(utts: list[Utterance], models: list[str], threads: int) -> Results:
    loaded = engines(models, threads)
    warm = padded(espeak("Hello there.", "en-us", 175))
    for engine, language in loaded.values():
        engine.transcribe(warm, language)  # first-call costs
    results = Results(utts, {m: [] for m in models})
    for n, utt in enumerate(utts):
        said = words(utt.text)
        for model in models[n % len(models) :] + models[: n % len(models)]:
            engine, language = loaded[model]
            started = time.perf_counter()
            text = engine.transcribe(utt.audio, language)
            ms = (time.perf_counter() - started) * 1000
            results.heard[model].append(Heard(text, edit_distance(said, words(text)), len(said), ms))
        if n % 50 == 49:
            print(f"{n + 1}/{len(utts)} utterances", file=sys.stderr, flush=True)
    return results


# --- report ------------------------------------------------------------------


def wer(heard: list[Heard], picked: list[int]) -> float:
    return sum(heard[i].errors for i in picked) / max(1, sum(heard[i].words for i in picked))


def row(label: str, results: Results, picked: list[int]) -> str:
    cells = [label, str(len(picked))]
    for heard in results.heard.values():
        cells.append(f"{wer(heard, picked):.1%}")
    for heard in results.heard.values():
        ms = [heard[i].ms for i in picked]
        cells.append(f"{pct(ms, 50):.0f} / {pct(ms, 90):.0f} ms")
    return "| " + " | ".join(cells) + " |"


def groups(utts: list[Utterance], picked: list[int]) -> list[tuple[str, list[int]]]:
    """The table's rows over ``picked``: each family, each of its voices and speeds, clean and noisy; then all."""
    out: list[tuple[str, list[int]]] = []
    for family in dict.fromkeys(utts[i].family for i in picked):
        mine = [i for i in picked if utts[i].family == family]
        out.append((f"**{family}, all**", mine))
        voices = list(dict.fromkeys(utts[i].voice for i in mine))
        if len(voices) > 1:
            out += [(f"{family} {v}", [i for i in mine if utts[i].voice == v]) for v in voices]
        for speed in dict.fromkeys(utts[i].speed for i in mine):
            out.append((f"{family} {speed}", [i for i in mine if utts[i].speed == speed]))
        out.append((f"{family} clean", [i for i in mine if not utts[i].noisy]))
        out.append((f"{family} noisy (10 dB SNR)", [i for i in mine if utts[i].noisy]))
    out.append(("clean, every voice", [i for i in picked if not utts[i].noisy]))
    out.append(("noisy, every voice", [i for i in picked if utts[i].noisy]))
    out.append(("**all**", picked))
    return out


def _quote(text: str) -> str:
    return '"' + text.replace("|", "/") + '"'


def heard_table(results: Results, picked: list[int], errors: bool) -> list[str]:
    """What each model heard of the ``picked`` utterances, with its word errors in brackets when ``errors``."""
    models = list(results.heard)
    lines = ["| speech | said | " + " | ".join(f"{m} heard" for m in models) + " |", "|---|---|" + "---|" * len(models)]
    for i in picked:
        utt = results.utterances[i]
        cells = [
            _quote(results.heard[m][i].text) + (f" ({results.heard[m][i].errors})" if errors else "") for m in models
        ]
        lines.append(f"| {utt.label} | {_quote(utt.text)} | " + " | ".join(cells) + " |")
    return lines


def section(results: Results, threads: int, command: str, started: dt.datetime, loads: tuple[float, float]) -> str:
    models = list(results.heard)
    utts = results.utterances
    questions = [i for i, u in enumerate(utts) if u.text not in FARM]
    farm = [i for i, u in enumerate(utts) if u.text in FARM]
    first = models[0]
    header = "| speech | utterances | " + " | ".join(f"WER {m}" for m in models) + " | "
    header += " | ".join(f"{m} p50 / p90" for m in models) + " |"
    lines = [header, "|---|---:|" + "---:|" * (2 * len(models))]
    lines += [row(label, results, picked) for label, picked in groups(utts, questions)]
    p50 = {m: pct([results.heard[m][i].ms for i in questions], 50) for m in models}
    ratios = ", ".join(f"{m} {p50[m] / p50[first]:.1f}x" for m in models[1:])
    worst = sorted(questions, key=lambda i: (-results.heard[first][i].errors, results.heard[first][i].words))[:10]
    mishearings = heard_table(results, [i for i in worst if results.heard[first][i].errors], errors=False)
    farm_rows = heard_table(results, farm, errors=True)
    farm_wer = ", ".join(f"{m} {wer(results.heard[m], farm):.1%}" for m in models)
    n_questions = len({utts[i].text for i in questions})
    return f"""{BEGIN}
## What is heard: Whisper tiny.en against Whisper base on varied speech (`bench/stt_voices.py`)

`{command}` on {started:%Y-%m-%d}, {started:%H:%M} UTC, {os.cpu_count()} CPUs ({platform.machine()}), no GPU;
load average {loads[0]:.1f} at the start; {machine_load(loads[1])}. Whisper int8 on the CPU with {threads}
thread(s) per call (what one call gets from a default server, pool of {POOL_DEFAULTS.size}), encoder window
{ENGINE_DEFAULTS.stt_window_s:g} s, no language given (a session that sets none): base, being multilingual,
then detects the language and decodes in faster-whisper's 30 s window; `base:en` is base told "en". {n_questions}
questions of `bench/quality_questions.py`, each spoken by espeak-ng ({", ".join(SPEAKERS)}; one of
{", ".join(map(str, SPEEDS))} words a minute per question and voice, rotating) and by Piper (en_US-joe-medium,
length scale {", ".join(map(str, RATES))}, rotating); a third of them again with white noise at 10 dB SNR;
0.3 s of silence before, 0.1 s after, 16 kHz. Every utterance went to every model in turn, the order
rotating. WER: words substituted, dropped or added over the words said (lower case, punctuation out,
numbers as words); time: one `transcribe` call.

{chr(10).join(lines)}

Time per utterance against {first}, p50 over every question: {ratios}.

Where {first} heard worst, and what the others heard (same audio):

{chr(10).join(mishearings)}

The farm-animal questions, every espeak voice at every speed (and noisy at 175), and Piper (WER {farm_wer};
word errors in brackets):

{chr(10).join(farm_rows)}
{END}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="the first N questions only (0: all)")
    parser.add_argument(
        "--models", nargs="+", default=["tiny.en", "base", "base:en"], help="packaged Whisper names, name:language"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=compute_threads(ENGINE_DEFAULTS, POOL_DEFAULTS.size),
        help="Whisper's threads per call (default: what a default server gives one call)",
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = dt.datetime.now(dt.UTC)
    load = os.getloadavg()[0]
    questions = [q for q, _ in QUESTIONS][: args.limit or None]
    utts = renderings(questions)
    print(f"{len(utts)} utterances rendered", file=sys.stderr, flush=True)
    results = hear(utts, args.models, args.threads)
    command = shlex.join(["python", "bench/stt_voices.py", *sys.argv[1:]])
    text = section(results, args.threads, command, started, (load, os.getloadavg()[0]))
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
