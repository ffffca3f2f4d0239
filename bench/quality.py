"""Answer quality, transcription accuracy and speed of candidate models, beside today's defaults, in one run.

- Questions: the set in ``bench/quality_questions.py``, typed (the LM alone, with the server's default
  instructions) and spoken (Piper speech -> the configuration's STT -> the LM), scored by keyword;
  greedy decoding and sampling at 0.8 (fixed seed), so the sampling default is chosen by the figures.
- STT: word error rate over every question spoken at three speaking rates, plus a third of them with
  white noise mixed in at 10 dB SNR. Only one Piper voice is packaged, so the rates stand in for voices.
- LM speed: first token and tokens per second, from the same generations.
- End of speech to first audio (p50/p90) and the server's RSS: one real server per configuration
  (pool of 1), spoken questions streamed at real-time pace, turns interleaved across servers.

Run: ``python bench/quality.py`` (``--help``). Prints markdown and rewrites the quality section of
docs/benchmarks.md; ``--no-write`` only prints.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import os
import re
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, write_section  # noqa: E402
from bench.quality_questions import QUESTIONS  # noqa: E402
from bench.voice_latency import compare_turns, pct  # noqa: E402
from pipelines.config import (  # noqa: E402
    DEFAULT_INSTRUCTIONS,  # noqa: E402
    DEFAULT_LM_BACKEND,
    DEFAULT_STT_MODEL,
)
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import edit_distance  # noqa: E402

BEGIN, END = "<!-- quality:begin -->", "<!-- quality:end -->"
RATES = (0.85, 1.0, 1.2)  # Piper length scales: faster, normal, slower speech
MAX_TOKENS = 64


@dataclass(frozen=True)
class Config:
    name: str
    stt: str  # packaged Whisper name
    lm_backend: str
    lm_model: str | None  # None: the backend's default
    lm_label: str
    sampled: bool = True  # also ask every question sampling at 0.8
    spoken: bool = True  # also ask the transcribed questions
    answer_model: str | None = None  # llama_cpp: a model for answers in words (S2S_LM_ANSWER_MODEL)

    def env(self) -> dict[str, str]:
        env = {"S2S_STT_MODEL": self.stt, "S2S_LM_BACKEND": self.lm_backend}
        if self.lm_model:
            env["S2S_LM_MODEL"] = self.lm_model
        if self.answer_model:
            env["S2S_LM_ANSWER_MODEL"] = self.answer_model
        return env


def smollm_gguf() -> str:
    from pipelines.backends.transformers_lm import default_model

    folder, name = default_model()
    return str(Path(folder) / name)


def gemma_gguf() -> str | None:
    """Gemma 3 270M, when its parts are installed (``make bench-quality`` installs them)."""
    from pipelines.backends._assembled import assembled

    try:
        return str(assembled("gemma-3-270m-q4_k_m") / "gemma-3-270m-q4_k_m.gguf")
    except FileNotFoundError:
        return None


def qwen15_gguf() -> str | None:
    """Qwen2.5-Coder-1.5B-Instruct, joined from its 22 packages (``make bench-quality`` installs them)."""
    from pipelines.backends.llama_cpp_lm import resolve_gguf

    try:
        return resolve_gguf("qwen2.5-coder-1.5b-instruct-q4_k_m")
    except FileNotFoundError:
        return None


def configs() -> list[Config]:
    """The candidates; the one that matches ``pipelines.config``'s defaults is marked in the report."""
    return (
        [
            Config(
                "tiny.en + SmolLM2-135M (transformers)",
                "tiny.en",
                "transformers",
                None,
                "SmolLM2-135M-Instruct Q4_1, transformers",
            ),
            Config(
                "tiny.en + SmolLM2-135M (llama.cpp)",
                "tiny.en",
                "llama_cpp",
                smollm_gguf(),
                "SmolLM2-135M-Instruct Q4_1, llama.cpp",
                sampled=False,
                spoken=False,
            ),
            Config(
                "tiny.en + Qwen2.5-Coder-0.5B (llama.cpp)",
                "tiny.en",
                "llama_cpp",
                None,
                "Qwen2.5-Coder-0.5B-Instruct Q4_K_M, llama.cpp",
            ),
            Config(
                "base + Qwen2.5-Coder-0.5B (llama.cpp)",
                "base",
                "llama_cpp",
                None,
                "Qwen2.5-Coder-0.5B-Instruct Q4_K_M, llama.cpp",
            ),
        ]
        + (
            [
                Config(
                    "base + Gemma 3 270M base (llama.cpp)",
                    "base",
                    "llama_cpp",
                    gemma,
                    "Gemma 3 270M (pretrained, not instruct) Q4_K_M, llama.cpp",
                    sampled=False,
                )
            ]
            if (gemma := gemma_gguf())
            else []
        )
        + (
            [
                Config(
                    "tiny.en + Qwen2.5-Coder-1.5B (llama.cpp)",
                    "tiny.en",
                    "llama_cpp",
                    qwen15,
                    "Qwen2.5-Coder-1.5B-Instruct Q4_K_M, llama.cpp",
                ),
                Config(
                    "tiny.en + 0.5B for calls, 1.5B for answers (llama.cpp)",
                    "tiny.en",
                    "llama_cpp",
                    None,
                    "Qwen2.5-Coder-0.5B decides and calls, Qwen2.5-Coder-1.5B answers, llama.cpp",
                    sampled=False,
                    answer_model=qwen15,
                ),
            ]
            if (qwen15 := qwen15_gguf())
            else []
        )
    )


def is_default(config: Config) -> bool:
    ours = (config.stt, config.lm_backend, config.lm_model, config.answer_model)
    return ours == (DEFAULT_STT_MODEL, DEFAULT_LM_BACKEND, None, None)


# --- scoring -----------------------------------------------------------------


def words(text: str) -> list[str]:
    from num2words import num2words

    text = re.sub(r"(\d+)", lambda m: " " + num2words(int(m.group(1))) + " ", text.lower())
    return re.sub(r"[^a-z0-9' ]+", " ", text.replace("-", " ")).split()


def right(answer: str, expected: tuple[str, ...]) -> bool:
    said = " " + " ".join(re.sub(r"[^a-z0-9 ]+", " ", answer.lower().replace("-", " ")).split()) + " "
    return any(f" {' '.join(w.replace('-', ' ').split())} " in said for w in expected)


# --- speech ------------------------------------------------------------------


@dataclass
class Utterance:
    text: str
    audio: np.ndarray  # 16 kHz float32
    kind: str  # "clean" or "noisy"


def piper_voice():
    """The packaged Piper voice (en_US-joe-medium), loaded for ``piper_speech``."""
    from piper import PiperVoice

    from pipelines.backends.piper_tts import default_voice_path

    return PiperVoice.load(default_voice_path())


def piper_speech(voice, text: str, length_scale: float) -> np.ndarray:
    """``text`` spoken by ``voice`` at ``length_scale`` (Piper's own variation on), float32 at 16 kHz."""
    from piper.config import SynthesisConfig

    from pipelines import audio

    chunks = voice.synthesize(text, syn_config=SynthesisConfig(length_scale=length_scale))
    samples = np.concatenate([np.asarray(c.audio_float_array, dtype=np.float32) for c in chunks])
    return audio.resample(samples, voice.config.sample_rate, 16000)


def with_noise(samples: np.ndarray, rng: np.random.Generator, snr_db: float = 10.0) -> np.ndarray:
    """``samples`` with white noise mixed in at ``snr_db`` below the speech's power."""
    noise = rng.standard_normal(samples.size).astype(np.float32)
    noise *= np.sqrt(np.mean(samples**2) / 10 ** (snr_db / 10)) / max(1e-9, float(np.std(noise)))
    return samples + noise


def utterances() -> list[Utterance]:
    voice = piper_voice()
    rng = np.random.default_rng(7)
    out: list[Utterance] = []
    for i, (question, _) in enumerate(QUESTIONS):
        samples = piper_speech(voice, question, RATES[i % len(RATES)])
        out.append(Utterance(question, samples, "clean"))
        if i % 3 == 0:
            out.append(Utterance(question, with_noise(samples, rng), "noisy"))
    return out


@dataclass
class SttResult:
    wer: dict[str, float] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)
    transcripts: dict[str, str] = field(default_factory=dict)  # clean question -> transcript


def run_stt(name: str, utts: list[Utterance]) -> SttResult:
    from pipelines.backends.faster_whisper_stt import WhisperEngine

    engine = WhisperEngine(name, cpu_threads=psutil.cpu_count() or 1)
    result = SttResult()
    errors: dict[str, int] = {"clean": 0, "noisy": 0}
    total: dict[str, int] = {"clean": 0, "noisy": 0}
    for utt in utts:
        started = time.perf_counter()
        text = engine.transcribe(utt.audio)
        result.seconds.append(time.perf_counter() - started)
        ref = words(utt.text)
        errors[utt.kind] += edit_distance(ref, words(text))
        total[utt.kind] += len(ref)
        if utt.kind == "clean":
            result.transcripts[utt.text] = text
    result.wer = {kind: errors[kind] / max(1, total[kind]) for kind in errors}
    result.wer["all"] = sum(errors.values()) / max(1, sum(total.values()))
    return result


# --- language model ----------------------------------------------------------


@dataclass
class LmResult:
    typed: dict[str, float] = field(default_factory=dict)  # "greedy" / "0.8" -> fraction right
    spoken: float = float("nan")
    first_token_s: list[float] = field(default_factory=list)
    tokens_per_s: list[float] = field(default_factory=list)
    load_s: float = 0.0
    wrong: list[str] = field(default_factory=list)


def load_lm(config: Config):
    threads = psutil.cpu_count() or 1
    if config.lm_backend == "llama_cpp":
        from pipelines.backends.llama_cpp_lm import LlamaCppLM

        return LlamaCppLM(config.lm_model, threads=threads, answer_model=config.answer_model)
    import torch

    from pipelines.backends.transformers_lm import TransformersLM

    torch.set_num_threads(threads)
    return TransformersLM(config.lm_model)


def ask(lm, question: str, temperature: float, result: LmResult) -> str:
    messages = [{"role": "system", "content": DEFAULT_INSTRUCTIONS}, {"role": "user", "content": question}]
    started = time.perf_counter()
    stream = lm.generate_stream(messages, MAX_TOKENS, temperature, seed=1234)
    pieces: list[str] = []
    first = None
    for piece in stream:
        if first is None:
            first = time.perf_counter() - started
        pieces.append(piece)
    total = time.perf_counter() - started
    if first is not None:
        result.first_token_s.append(first)
        if stream.output_tokens > 1 and total > first:
            result.tokens_per_s.append((stream.output_tokens - 1) / (total - first))
    return "".join(pieces).strip()


def run_lm(config: Config, transcripts: dict[str, str]) -> LmResult:
    result = LmResult()
    started = time.perf_counter()
    lm = load_lm(config)
    result.load_s = time.perf_counter() - started
    for label, temperature in (("greedy", 0.0), ("0.8", 0.8))[: 2 if config.sampled else 1]:
        good = 0
        for question, expected in QUESTIONS:
            answer = ask(lm, question, temperature, result)
            if right(answer, expected):
                good += 1
            elif label == "greedy" and len(result.wrong) < 6:
                result.wrong.append(f"{question} -> {answer[:90]!r}")
        result.typed[label] = good / len(QUESTIONS)
    if config.spoken:
        good = sum(right(ask(lm, transcripts.get(q, q), 0.0, result), exp) for q, exp in QUESTIONS)
        result.spoken = good / len(QUESTIONS)
    del lm
    gc.collect()
    return result


# --- latency and memory of a real server ----------------------------------------


def run_latency(chosen: list[Config], turns: int) -> dict[str, tuple[list[float], float]]:
    """One server per configuration; returns (end of speech -> first audio seconds, RSS MiB)."""
    servers: dict[str, LiveServer] = {}
    out: dict[str, tuple[list[float], float]] = {}
    try:
        for config in chosen:
            work = Path(tempfile.mkdtemp(prefix="s2s-quality-"))
            server = LiveServer(
                work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "1", "S2S_LOG_LEVEL": "warning", **config.env()}
            )
            try:
                servers[config.name] = server.start(ready_timeout=900)
            except Exception as exc:
                print(f"{config.name}: the server did not start: {exc}", file=sys.stderr)
                server.stop()
        results = asyncio.run(compare_turns({name: s.ws for name, s in servers.items()}, turns))
        for name, server in servers.items():
            rss = psutil.Process(server.process.pid).memory_info().rss / 2**20
            out[name] = ([r["v2v_s"] for r in results[name]], rss)
    finally:
        for server in servers.values():
            server.stop()
    return out


# --- report ------------------------------------------------------------------


def report(
    chosen: list[Config],
    stt: dict[str, SttResult],
    lms: dict[str, LmResult],
    latency: dict[str, tuple[list[float], float]],
    n_utts: int,
    command: str,
    loads: tuple[float, float],
) -> str:
    lines = [
        BEGIN,
        "## Answer quality, transcription and speed of candidate models",
        "",
        f"`{command}` on {dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs, load average "
        f"{loads[0]:.1f} before; {machine_load(loads[1])}. {len(QUESTIONS)} questions scored by "
        f"keyword; instructions: the server's default. STT over {n_utts} utterances (Piper en_US-joe-medium at "
        f"length scales {', '.join(map(str, RATES))}; every third question also with white noise at 10 dB "
        "SNR).",
        "",
        "| STT | WER clean | WER noisy | WER all | time per utterance p50 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in stt.items():
        lines.append(
            f"| Whisper {name} | {r.wer['clean']:.1%} | {r.wer['noisy']:.1%} | {r.wer['all']:.1%} | "
            f"{pct(r.seconds, 50) * 1000:.0f} ms |"
        )
    lines += [
        "",
        "| configuration | LM | typed, greedy | typed, 0.8 | spoken, greedy | LM first token p50 | "
        "tokens/s p50 | end of speech to first audio p50 / p90 | server RSS |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in chosen:
        lm = lms.get(c.name)
        v2v, rss = latency.get(c.name, ([], float("nan")))
        if lm is None:
            continue
        name = f"{c.name} (the defaults)" if is_default(c) else c.name
        lines.append(
            f"| {name} | {c.lm_label} | {lm.typed['greedy']:.0%} | {_share(lm.typed.get('0.8'))} | "
            f"{_share(lm.spoken)} | {pct(lm.first_token_s, 50) * 1000:.0f} ms | "
            f"{pct(lm.tokens_per_s, 50):.0f} | "
            f"{pct(v2v, 50) * 1000:.0f} / {pct(v2v, 90) * 1000:.0f} ms (n={len(v2v)}) | {rss:.0f} MiB |"
        )
    lines += ["", "Some wrong greedy answers per configuration:", ""]
    for c in chosen:
        if c.name in lms:
            lines.append(f"- {c.name}: " + "; ".join(lms[c.name].wrong[:3]))
    lines.append(END)
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, nargs="*", help="indices of the configurations to run (default all)")
    parser.add_argument("--turns", type=int, default=6, help="spoken turns per server for the latency (0: none)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    every = configs()
    chosen = [every[i] for i in args.configs] if args.configs else every
    loads = [os.getloadavg()[0]]
    utts = utterances()
    stt = {}
    for name in dict.fromkeys(c.stt for c in chosen):
        stt[name] = run_stt(name, utts)
        print(f"STT {name}: WER {stt[name].wer}, p50 {pct(stt[name].seconds, 50):.2f} s", file=sys.stderr, flush=True)
    lms = {}
    for c in chosen:
        try:
            lms[c.name] = run_lm(c, stt[c.stt].transcripts)
        except Exception as exc:  # one broken candidate must not lose the others' figures
            print(f"{c.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"done {c.name}: {lms.get(c.name)}", file=sys.stderr, flush=True)
    latency = run_latency(chosen, args.turns) if args.turns else {}
    for name, (v2v, rss) in latency.items():
        print(f"latency {name}: {[round(v, 3) for v in v2v]} RSS {rss:.0f} MiB", file=sys.stderr, flush=True)
    loads.append(os.getloadavg()[0])
    command = " ".join(shlex.quote(a) for a in ["python", "bench/quality.py", *sys.argv[1:]])
    text = report(chosen, stt, lms, latency, len(utts), command, (loads[0], loads[1]))
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
