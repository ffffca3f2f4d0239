"""Fitting a long conversation to the LM's context: the time to build one prompt, before and after.

"Before" is the trimming that recounted the whole history for each message it dropped (kept here as
``quadratic_messages``, the old ``LmStage._messages``); "after" is ``LmStage._messages`` with its kept
per-item token counts. The FAKE model counts words; ``--real`` uses the packaged SmolLM2 tokenizer
(chat template included), as the server does:

    .venv/bin/python bench/lm_history.py --items 10000
    .venv/bin/python bench/lm_history.py --real --items 2000 --before-limit-s 120
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.config import SessionSettings  # noqa: E402
from pipelines.loopback import FakeLanguageModel  # noqa: E402
from pipelines.messages import AddItem, HistoryItem, ResponseRequest  # noqa: E402
from pipelines.stages.base import CancelFlag, SessionContext  # noqa: E402
from pipelines.stages.lm import LmStage  # noqa: E402


def quadratic_messages(stage: LmStage, req: ResponseRequest, limit_s: float) -> tuple[int, bool]:
    """The old trimming: drop the oldest message, recount everything, repeat. Returns (kept, finished)."""
    turns = tuple(stage.history.values())
    system = [{"role": "system", "content": req.instructions}]
    messages = [{"role": item.role, "content": item.text} for item in turns if item.text]
    budget = stage.model.context_length - stage._max_tokens(req)
    deadline = time.perf_counter() + limit_s
    while len(messages) > 1 and stage.model.count_tokens(system + messages) > budget:
        messages.pop(0)
        if time.perf_counter() > deadline:
            return len(messages), False
    return len(messages), True


def build(model: object, items: int) -> tuple[LmStage, ResponseRequest]:
    context = SessionContext()
    context.reset(1)
    stage = LmStage(context, model, max_history_tokens=10**9)  # type: ignore[arg-type]  (all kept: trimming does it)
    for index in range(items):
        role = "user" if index % 2 == 0 else "assistant"
        list(
            stage.process(
                AddItem(
                    generation=1,
                    item=HistoryItem(f"item_{index}", role, f"This is message number {index} of a long chat."),
                )
            )
        )
    req = ResponseRequest.from_settings(SessionSettings(instructions="Answer briefly."), 1, output_modalities=("text",))
    return stage, req


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--real", action="store_true", help="the packaged SmolLM2 tokenizer instead of the FAKE model")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before-limit-s", type=float, default=60.0, help="stop the old trimming after this long")
    args = parser.parse_args()
    if args.real:
        from pipelines.backends.transformers_lm import TransformersLM

        model: object = TransformersLM()
    else:
        model = FakeLanguageModel()
    started = time.perf_counter()
    stage, req = build(model, args.items)
    print(
        f"{args.items} items added (each counted once) in {time.perf_counter() - started:.2f} s; "
        f"context {model.context_length} tokens"
    )  # type: ignore[attr-defined]
    cancel = CancelFlag(stage.context, req.response_id, 1)
    times = []
    for _ in range(args.runs):
        started = time.perf_counter()
        prompt = stage._messages(req, cancel)
        times.append(time.perf_counter() - started)
    kept = len(prompt) - 1
    print(
        f"after:  {kept} messages kept ({stage.model.count_tokens(prompt)} tokens of a budget of "
        f"{model.context_length - stage._max_tokens(req)}), median {statistics.median(times) * 1000:.1f} ms "  # type: ignore[attr-defined]
        f"(max {max(times) * 1000:.1f} ms) over {args.runs} prompts"
    )
    started = time.perf_counter()
    kept, finished = quadratic_messages(stage, req, args.before_limit_s)
    took = time.perf_counter() - started
    print(
        f"before: {kept} messages kept in {took:.1f} s"
        if finished
        else f"before: stopped after {took:.1f} s, {kept} messages still over the context"
    )


if __name__ == "__main__":
    main()
