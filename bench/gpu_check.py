"""GPU check of the LM path: the transformers backend and a pipeline unit on CUDA.

The default weights cannot travel to a GPU machine here (the GGUF is 94 MB, the
carry limit 64 MiB), so this builds the SmolLM2-135M architecture from its
config and tokenizer (copied next to the repo, see ``--tokenizer``) with random
weights: the text is gibberish, but device placement, bfloat16, streaming,
cancelling, two threads generating at once, and a unit running an LM stage on
the GPU are the code an operator's GPU runs. Prints JSON.

Run: ``python bench/gpu_check.py --tokenizer DIR`` where DIR holds config.json,
tokenizer.json, tokenizer_config.json and chat_template.jinja of the model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_random_model(tokenizer_dir: Path, out: Path) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, out / name)
    return out


def timed_stream(lm, messages, tokens: int, cancel=None) -> dict:
    started = time.perf_counter()
    stream = lm.generate_stream(messages, tokens, 0.8, cancel)
    first = None
    for _ in stream:
        if first is None:
            first = time.perf_counter() - started
    total = time.perf_counter() - started
    return {
        "first_token_s": round(first or 0.0, 4),
        "tokens": stream.output_tokens,
        "total_s": round(total, 3),
        "tokens_per_s": round(stream.output_tokens / max(1e-9, total - (first or 0.0)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    import torch

    from pipelines.backends.transformers_lm import TransformersLM
    from pipelines.engines import resolve_device

    report: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    report["device_auto"] = resolve_device("auto")
    report["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    folder = build_random_model(args.tokenizer, Path(tempfile.mkdtemp()) / "smollm2-arch-random")
    started = time.perf_counter()
    lm = TransformersLM(str(folder), device=args.device)
    report["load_s"] = round(time.perf_counter() - started, 2)
    report["dtype"] = str(next(lm.model.parameters()).dtype)
    report["param_device"] = str(next(lm.model.parameters()).device)
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    timed_stream(lm, messages, 8)  # first-call costs
    report["single"] = [timed_stream(lm, messages, 64) for _ in range(3)]

    cancel = threading.Event()
    stream = lm.generate_stream(messages, 512, 0.8, cancel)
    pieces = 0
    for _ in stream:
        pieces += 1
        if pieces == 5:
            cancel.set()
    report["cancel"] = {"pieces_after_cancel": pieces - 5, "output_tokens": stream.output_tokens}

    results: dict[int, dict] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, timed_stream(lm, messages, 64))) for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report["two_threads"] = results

    # A whole unit: FAKE VAD/STT/TTS (named so in pipelines/loopback.py) around the real LM stage on CUDA.
    from pipelines.factory import synthetic_turn
    from pipelines.loopback import loopback_engines
    from pipelines.stages.lm import LmStage
    from pipelines.stages.stt import SttStage
    from pipelines.stages.tts import TtsStage
    from pipelines.stages.vad import VadStage
    from pipelines.unit import PipelineUnit

    def stages(context):
        vad, stt, _, tts = loopback_engines(context)
        return [
            VadStage(context, vad, partial_every_ms=0, speculate_after_ms=0, min_interrupt_ms=0),
            SttStage(context, stt),
            LmStage(context, lm, max_new_tokens=24),
            TtsStage(context, {"alloy": tts}),
        ]

    unit = PipelineUnit(0, stages)
    unit.start(timeout=60)
    report["unit_turns"] = [synthetic_turn(unit, timeout=60) for _ in range(3)]
    unit.stop()
    if torch.cuda.is_available():
        report["gpu_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
