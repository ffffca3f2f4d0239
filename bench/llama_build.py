"""What the llama.cpp build's instructions are worth: the installed llama-cpp-python against other builds.

`make setup` builds llama.cpp for AVX2, plus AVX-512 where the CPU lists it, never -march=native (whose
AMX code died with "Illegal instruction" on a Xeon that lists AMX but traps it); see scripts/llama_cpp.sh.
This bench measures, on this machine, the default GGUF's prompt evaluation and decoding speed with each
build (each in its own process, the builds' runs interleaved), and with ``--voice-turns`` the end of speech
to first reply audio of the real pipeline on each build (bench/voice_latency.py's comparison).

    # the AVX2-only build, kept by make setup as a wheel (or build one: pip wheel with CMAKE_ARGS)
    .venv/bin/python bench/llama_build.py --wheel avx2=$(ls ~/.cache/s2s/wheels/llama-cpp-python-*-HASH/*.whl) \\
        --rounds 5 --voice-turns 10

Figures go to docs/benchmarks.md (``--no-write`` to leave it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, write_section  # noqa: E402
from bench.voice_latency import compare_configs, compare_table  # noqa: E402

BEGIN, END = "<!-- llama-build:begin -->", "<!-- llama-build:end -->"

# One process, one build: loads the default GGUF, evaluates a prompt, decodes greedily; prints JSON.
PROBE = r"""
import json, sys, time
import llama_cpp
from pipelines.backends.llama_cpp_lm import default_model_path
threads, prompt_tokens, new_tokens, reps = map(int, sys.argv[1:5])
lm = llama_cpp.Llama(model_path=default_model_path(), n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                     verbose=False)
text = " ".join(f"Item {i} is on the list." for i in range(400))
prompt = lm.tokenize(text.encode())[:prompt_tokens]
info = llama_cpp.llama_print_system_info().decode().replace("CPU :", "|")  # "CPU : SSE3 = 1 | AVX = 1 | ..."
pairs = (part.partition("=") for part in info.split("|"))
features = [name.strip() for name, _, value in pairs if value.strip() == "1"]
out = {"lib": llama_cpp.__file__, "features": features, "prompt_s": [], "decode_s": []}
for _ in range(reps):
    lm.reset()
    t0 = time.perf_counter()
    lm.eval(prompt)
    t1 = time.perf_counter()
    for _ in range(new_tokens):
        token = lm.sample(temp=0.0)
        lm.eval([token])
    out["prompt_s"].append(t1 - t0)
    out["decode_s"].append(time.perf_counter() - t1)
print(json.dumps(out))
"""


def run_build(path: str | None, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (path, str(ROOT)) if p))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(args.threads), str(args.prompt_tokens), str(args.new_tokens), str(args.reps)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--wheel",
        action="append",
        default=[],
        metavar="NAME=WHEEL",
        help="another build of llama-cpp-python to compare (repeatable)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="processes per build, interleaved")
    parser.add_argument("--reps", type=int, default=3, help="prompt + decode runs per process")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument(
        "--voice-turns",
        type=int,
        default=0,
        help="also this many spoken turns per build through the real pipeline (0: none)",
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as unpacked:
        builds: dict[str, str | None] = {"installed (make setup)": None}
        for spec in args.wheel:
            name, _, wheel = spec.partition("=")
            if not wheel:
                parser.error(f"--wheel {spec!r}: give NAME=WHEEL")
            target = Path(unpacked) / name
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(target)
            builds[name] = str(target)

        runs: dict[str, dict[str, list[float]]] = {name: {"prompt_s": [], "decode_s": []} for name in builds}
        features: dict[str, list[str]] = {}
        for round_ in range(args.rounds):
            for name, path in builds.items():
                out = run_build(path, args)
                if path and not out["lib"].startswith(path):
                    raise SystemExit(f"{name}: loaded {out['lib']}, not the wheel")
                features[name] = out["features"]
                for key in ("prompt_s", "decode_s"):
                    # the first rep of each process warms caches; keep the rest
                    runs[name][key].extend(out[key][1:] if len(out[key]) > 1 else out[key])
                print(
                    f"round {round_ + 1}: {name}: prompt {statistics.median(out['prompt_s']):.3f} s, "
                    f"decode {statistics.median(out['decode_s']):.3f} s",
                    flush=True,
                )

        voice: list[str] = []
        if args.voice_turns:
            configs = {name: {"PYTHONPATH": path} if path else {} for name, path in builds.items()}
            results, load_before, load_after = compare_configs(configs, args.voice_turns)
            voice = [
                "",
                f"End of speech to first reply audio, real default pipeline, one server per build, "
                f"{args.voice_turns} turns each, interleaved (load average {load_before:.1f} before, "
                f"{load_after:.1f} after):",
                "",
                *compare_table(results),
            ]

    rows = []
    for name, got in runs.items():
        prompt_tps = sorted(args.prompt_tokens / s for s in got["prompt_s"])
        decode_tps = sorted(args.new_tokens / s for s in got["decode_s"])
        vector = " ".join(f for f in features[name] if f.startswith(("AVX", "AMX")))
        rows.append(
            f"| {name} | {vector} | {statistics.median(prompt_tps):.0f} "
            f"({prompt_tps[0]:.0f}-{prompt_tps[-1]:.0f}) | {statistics.median(decode_tps):.1f} "
            f"({decode_tps[0]:.1f}-{decode_tps[-1]:.1f}) |"
        )
    text = "\n".join(
        [
            BEGIN,
            "## llama.cpp builds: which instructions (`bench/llama_build.py`)",
            "",
            f"Default GGUF (Qwen2.5-Coder-0.5B Q4_K_M), {args.threads} threads, a {args.prompt_tokens}-token prompt and "  # noqa: E501
            f"{args.new_tokens} greedy tokens; {args.rounds} processes per build, interleaved, {args.reps} runs each "
            f"(the first of each process left out). Tokens per second, median (min-max). Machine: {os.cpu_count()} "
            f"cores; {machine_load(os.getloadavg()[0])}.",
            "",
            "| build | instructions | prompt tokens/s | decode tokens/s |",
            "| --- | --- | --- | --- |",
            *rows,
            *voice,
            END,
        ]
    )
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
