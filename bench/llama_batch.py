"""What one llama.cpp decode of several sequences costs against one sequence, on this machine's CPU.

Four talkers at once read four prompts and write four answers; llama.cpp can take them in one
context, a sequence each, one ``llama_decode`` per step for all of them. This measures whether that
would pay here: the default LM (Qwen2.5-Coder-0.5B-Instruct Q4_K_M), one context with ``--sequences``
sequences, a step of one token for one sequence against one token for each, and a prompt chunk of
``--prompt`` tokens for one against a chunk for each, for each thread count. Medians of ``--steps``.

Run: ``python bench/llama_batch.py`` (``--help``); prints markdown and rewrites its section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, write_section  # noqa: E402
from pipelines.backends.llama_cpp_lm import resolve_gguf  # noqa: E402

BEGIN, END = "<!-- llama_batch:begin -->", "<!-- llama_batch:end -->"
FIRST_PROMPT = 60  # tokens each sequence holds before the steps are timed


class Batch:
    """One llama.cpp context of ``sequences`` sequences, each at its own position."""

    def __init__(self, model: object, sequences: int, threads: int) -> None:
        import llama_cpp

        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_seq_max = 2048, 512, sequences
        params.n_threads = params.n_threads_batch = threads
        self.context = llama_cpp.llama_init_from_model(model, params)
        self.position = dict.fromkeys(range(sequences), 0)

    def step(self, sequences: range, tokens: list[int]) -> float:
        """Seconds of one decode of ``tokens`` for each of ``sequences`` (the logits of each one's last)."""
        import llama_cpp

        count = len(sequences) * len(tokens)
        batch = llama_cpp.llama_batch_init(count, 0, len(self.position))
        try:
            at = 0
            for sequence in sequences:
                for offset, token in enumerate(tokens):
                    batch.token[at], batch.pos[at] = token, self.position[sequence] + offset
                    batch.n_seq_id[at], batch.seq_id[at][0] = 1, sequence
                    batch.logits[at] = offset == len(tokens) - 1
                    at += 1
                self.position[sequence] += len(tokens)
            batch.n_tokens = count
            started = time.perf_counter()
            if llama_cpp.llama_decode(self.context, batch) != 0:
                raise RuntimeError("llama_decode failed")
            return time.perf_counter() - started
        finally:
            llama_cpp.llama_batch_free(batch)

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_free(self.context)


def measure(sequences: int, threads: int, prompt: int, steps: int) -> dict[str, float]:
    import llama_cpp

    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(resolve_gguf(None).encode(), llama_cpp.llama_model_default_params())
    batch = Batch(model, sequences, threads)
    try:
        every = range(sequences)
        words = list(range(1000, 1000 + FIRST_PROMPT))
        batch.step(every, words)
        ms = {
            "token, one": [batch.step(range(1), [1500 + k]) for k in range(steps)],
            "token, each": [batch.step(every, [1500 + k]) for k in range(steps)],
            "prompt, one": [batch.step(range(1), words[:prompt]) for _ in range(steps)],
            "prompt, each": [batch.step(every, words[:prompt]) for _ in range(steps)],
        }
        return {name: float(np.median(times)) * 1000 for name, times in ms.items()}
    finally:
        batch.close()
        llama_cpp.llama_model_free(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prompt", type=int, default=12, help="tokens of a prompt chunk")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    n = args.sequences
    lines = [
        BEGIN,
        "## One llama.cpp decode for several sequences (`bench/llama_batch.py`)",
        "",
        f"`python bench/llama_batch.py {shlex.join(sys.argv[1:])}` on {dt.date.today().isoformat()}, "
        f"{os.cpu_count()} CPUs; the default LM, one context of {n} sequences; medians of {args.steps} decodes.",
        "",
        f"| threads | a token for one | a token for each of {n} | throughput against one at a time "
        f"| {args.prompt} prompt tokens for one | for each of {n} | throughput |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for threads in args.threads:
        ms = measure(n, threads, args.prompt, args.steps)
        lines.append(
            f"| {threads} | {ms['token, one']:.0f} ms | {ms['token, each']:.0f} ms "
            f"| {n * ms['token, one'] / ms['token, each']:.2f}x | {ms['prompt, one']:.0f} ms "
            f"| {ms['prompt, each']:.0f} ms | {n * ms['prompt, one'] / ms['prompt, each']:.2f}x |"
        )
    lines += ["", f"The machine: {machine_load(os.getloadavg()[0])}.", END]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
