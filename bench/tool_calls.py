"""Function calling with the default models: right calls, false calls, latency.

Offers the seven tools of ``bench/tool_set.py`` with ``tool_choice: "auto"``
and the server's default instructions, and sends each request of the set
(32 that need a tool, 16 that do not) to the server's default LM engine and
model (``--lm-backend transformers`` for SmolLM2-135M on transformers) at the
session's default temperature (greedy; ``--temperature`` for sampling, seeded
per request):

* typed: the request's text is the user turn;
* spoken: the request is spoken by the packaged Piper voice, transcribed by
  the real faster-whisper STT, and the transcript is the user turn.

The LM's output goes through the same ``ResponseOutput`` the LM stage uses
(``pipelines/stages/lm_output.py``), so a call counts only if it comes out as
a ``FunctionCallDone``, and the text that reaches TTS is checked for call
markup. As in a session after its first turn, the prompt prefix (instructions
and tools) stays in one prefix cache. A text answer ends the request at its
first piece: the grammar allows no call after text, so the decision is made.

Counts: right call (right function and expected arguments), wrong call,
no call; false calls among the requests that need none; LM time from the
request to the finished call (and STT time for spoken requests).

Run: ``python bench/tool_calls.py`` (``--help`` for options); prints markdown,
writes JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.tool_set import CHAT_REQUESTS, TOOL_REQUESTS, TOOLS, Request, arguments_match  # noqa: E402
from pipelines.config import DEFAULT_LM_BACKEND  # noqa: E402
from pipelines.messages import FunctionCallDone, ResponseRequest, TextDelta, TextForSpeech, ToolChoice  # noqa: E402
from pipelines.stages.lm_output import ResponseOutput  # noqa: E402
from pipelines.tool_calls import CALL_OPEN  # noqa: E402
from pipelines.tools import parse_tools  # noqa: E402
from realtime.session import DEFAULT_INSTRUCTIONS, DEFAULT_TEMPERATURE  # noqa: E402

MAX_TOKENS = 128
THREADS = max(1, min(2, os.cpu_count() or 1))


def transcriber():
    import numpy as np

    from pipelines import audio
    from pipelines.backends.faster_whisper_stt import WhisperEngine
    from pipelines.backends.piper_tts import PiperEngine

    piper, whisper = PiperEngine(), WhisperEngine(cpu_threads=2)

    def spoken(text: str) -> tuple[str, float]:
        voice = np.concatenate(list(piper.synthesize(text)))
        samples = audio.resample(voice, piper.sample_rate, 16000)
        started = time.perf_counter()
        heard = whisper.transcribe(samples)
        return heard.strip(), time.perf_counter() - started

    return spoken


def load_lm(backend: str) -> Any:
    """The server's LM engine with its packaged model, on this machine's cores (at most two)."""
    if backend == "llama_cpp":
        from pipelines.backends.llama_cpp_lm import LlamaCppLM

        return LlamaCppLM(threads=THREADS)
    import torch

    from pipelines.backends.transformers_lm import TransformersLM

    torch.set_num_threads(THREADS)
    return TransformersLM()


def one_request(lm: Any, prefix: Any, tools: Any, text: str, seed: int, choice: str = "auto",
                temperature: float = DEFAULT_TEMPERATURE) -> dict[str, Any]:
    req = ResponseRequest(generation=0, response_id="resp_bench", instructions=DEFAULT_INSTRUCTIONS,
                          output_modalities=("audio",), max_output_tokens=None, voice="alloy",
                          output_format="audio/pcm", temperature=temperature, tools=tools,
                          tool_choice=ToolChoice(choice))
    messages = [{"role": "system", "content": DEFAULT_INSTRUCTIONS}, {"role": "user", "content": text}]
    output = ResponseOutput(req, "", first_piece_words=4)
    started = time.perf_counter()
    stream = lm.generate_stream(messages, MAX_TOKENS, temperature, seed=seed, prefix=prefix, tools=tools,
                                tool_choice=req.tool_choice)
    call, spoken_text, call_s = None, "", None
    for piece in stream:
        for msg in output.feed(piece):
            if isinstance(msg, FunctionCallDone):
                call, call_s = msg, time.perf_counter() - started
            elif isinstance(msg, (TextForSpeech, TextDelta)):
                spoken_text += getattr(msg, "text", "")
        if output.text_parts:
            break  # a text answer: no call can follow
    for msg in output.finish(True):
        if isinstance(msg, FunctionCallDone):
            call, call_s = msg, time.perf_counter() - started
        elif isinstance(msg, TextForSpeech):
            spoken_text += msg.text
    return {"call": None if call is None else {"name": call.name, "arguments": json.loads(call.arguments)},
            "call_s": call_s, "text": "".join(output.text_parts), "spoken": spoken_text,
            "leaked": CALL_OPEN in spoken_text or "</tool_call>" in spoken_text}


def verdict(request: Request, result: dict[str, Any]) -> str:
    call = result["call"]
    if request.tool is None:
        return "false call" if call else "no call (right)"
    if call is None:
        return "no call"
    if call["name"] != request.tool:
        return "wrong function"
    return "right" if arguments_match(request.expect, call["arguments"]) else "wrong arguments"


def run(limit_tool: int, limit_chat: int, modes: list[str], json_path: Path | None,
        choice: str = "auto", backend: str = DEFAULT_LM_BACKEND,
        temperature: float = DEFAULT_TEMPERATURE) -> list[dict[str, Any]]:
    lm = load_lm(backend)
    tools = parse_tools(TOOLS)
    prefix = lm.new_prefix_cache()
    spoken = transcriber() if "spoken" in modes else None
    requests = TOOL_REQUESTS[:limit_tool] + CHAT_REQUESTS[:limit_chat]
    rows: list[dict[str, Any]] = []
    for mode in modes:
        for index, request in enumerate(requests):
            text, stt_s = (request.text, None) if mode == "typed" else spoken(request.text)
            result = one_request(lm, prefix, tools, text, seed=index, choice=choice, temperature=temperature)
            row = {"mode": mode, "request": request.text, "heard": text, "tool": request.tool, "stt_s": stt_s,
                   **result}
            row["verdict"] = verdict(request, result)
            rows.append(row)
            print(f"{mode:6} {row['verdict']:16} {request.text!r} heard {text!r} -> "
                  f"{result['call'] or result['text'][:60]!r}", file=sys.stderr, flush=True)
            if json_path:
                json_path.write_text(json.dumps(rows, indent=1))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| input | right calls | wrong function | wrong arguments | no call | false calls | "
             "LM to finished call, median / p90 s | STT median s |", "|---|---|---|---|---|---|---|---|"]
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        tool = [r for r in mine if r["tool"]]
        chat = [r for r in mine if not r["tool"]]
        count = {v: sum(r["verdict"] == v for r in tool) for v in ("right", "wrong function", "wrong arguments", "no call")}
        false = sum(r["verdict"] == "false call" for r in chat)
        times = sorted(r["call_s"] for r in mine if r["call_s"] is not None)
        stt = [r["stt_s"] for r in mine if r["stt_s"] is not None]
        pct = (lambda n, d: f"{n}/{d} ({100 * n / d:.0f} %)" if d else "-")
        lat = f"{statistics.median(times):.2f} / {times[int(0.9 * (len(times) - 1))]:.2f}" if times else "-"
        lines.append(f"| {mode} | {pct(count['right'], len(tool))} | {count['wrong function']} | "
                     f"{count['wrong arguments']} | {count['no call']} | {pct(false, len(chat))} | {lat} | "
                     f"{statistics.median(stt):.2f} |" if stt else
                     f"| {mode} | {pct(count['right'], len(tool))} | {count['wrong function']} | "
                     f"{count['wrong arguments']} | {count['no call']} | {pct(false, len(chat))} | {lat} | - |")
    leaks = sum(r["leaked"] for r in rows)
    lines.append(f"\nCall markup in text for TTS: {leaks} of {len(rows)} responses.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tool-requests", type=int, default=len(TOOL_REQUESTS))
    parser.add_argument("--chat-requests", type=int, default=len(CHAT_REQUESTS))
    parser.add_argument("--modes", nargs="+", default=["typed", "spoken"], choices=["typed", "spoken"])
    parser.add_argument("--tool-choice", default="auto", choices=["auto", "required"],
                        help="'required' measures argument quality and call latency when the model must call")
    parser.add_argument("--lm-backend", default=DEFAULT_LM_BACKEND, choices=["llama_cpp", "transformers"],
                        help="the engine, with its packaged model (default: the server's)")
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                        help="the server's default is greedy (0); clients may ask for 0.6-1.2")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--from-json", type=Path, help="print the table of an earlier run's JSON")
    args = parser.parse_args()
    if args.from_json:
        rows = json.loads(args.from_json.read_text())
    else:
        rows = run(args.tool_requests, args.chat_requests, args.modes, args.json, args.tool_choice,
                   args.lm_backend, args.temperature)
        print(f"LM: {args.lm_backend}, temperature {args.temperature}, {THREADS} threads")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores\n")
    print(table(rows))


if __name__ == "__main__":
    main()
