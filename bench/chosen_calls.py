"""When the model chooses not to call: an MCP-style tool that only the instructions explain, with each LM.

The case of issue 42: a session's instructions say "use the words tool when asked for the secret word", the
tool (as an MCP server lists it, with no description, or with one) is offered with ``tool_choice: "auto"``,
and the user asks for the secret word in four ways. The default model answered "blue" and never called.
This asks the LM engine itself (``LlamaCppLM.generate_stream``, as the server does, greedy) with each model
and each description, and counts the calls; ``required`` and the named tool are asked too, and must call.

Run: ``python bench/chosen_calls.py`` (``--help``); prints markdown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.config import DEFAULT_INSTRUCTIONS, FunctionTool, ToolChoice  # noqa: E402
from pipelines.tool_calls import CallEnd, CallParser  # noqa: E402

INSTRUCTIONS = DEFAULT_INSTRUCTIONS + " Use the words tool when asked for the secret word."
QUESTIONS = (
    "What is the secret word?",
    "Tell me the secret word.",
    "Can you give me the secret word please?",
    "I need the secret word.",
)
DESCRIPTIONS = {
    "as an MCP server lists it without a description": "A tool of the MCP server demo.",
    "described": "Returns the secret word.",
    "with the instructions' sentence that names it": "A tool of the MCP server demo. "
    "Use the words tool when asked for the secret word.",
}
MODELS = {
    "Qwen2.5-Coder-0.5B (default)": None,
    "Qwen2.5-Coder-1.5B": "qwen2.5-coder-1.5b-instruct-q4_k_m",
}


def calls(text: str) -> list[CallEnd]:
    parser = CallParser()
    return [event for event in [*parser.feed(text), *parser.finish()] if isinstance(event, CallEnd)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from pipelines.backends.llama_cpp_lm import LlamaCppLM

    print("| model | tool | auto: calls | required: calls | named: calls | an answer in words (auto) |")
    print("|---|---|---:|---:|---:|---|")
    for label, model in MODELS.items():
        lm = LlamaCppLM(model, threads=args.threads, n_ctx=2048)
        for kind, description in DESCRIPTIONS.items():
            tool = FunctionTool("words", description, {"type": "object", "properties": {}})
            counts = {"auto": 0, "required": 0, "function": 0}
            said = ""
            for question in QUESTIONS:
                messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": question}]
                for mode in counts:
                    choice = ToolChoice(mode, "words" if mode == "function" else "")
                    text = "".join(lm.generate_stream(messages, 48, 0.0, tools=[tool], tool_choice=choice))
                    made = [call for call in calls(text) if call.name == "words"]
                    counts[mode] += bool(made)
                    if mode == "auto" and not made and not said:
                        said = text.strip().replace("|", "/")[:80]
            n = len(QUESTIONS)
            print(
                f"| {label} | {kind} | {counts['auto']}/{n} | {counts['required']}/{n} | "
                f"{counts['function']}/{n} | {said!r} |"
            )


if __name__ == "__main__":
    main()
