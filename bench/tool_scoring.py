"""How the function-calling bench scores a spoken answer given after a tool's result.

An answer is *in words* when it is text (not another call), not empty, free of
call markup, and says at least one key fact of the result (a number may be
said as digits or words: 21, twenty-one). An answer to an error result must
tell the user it failed, in words. *Call markup* is anything of the call's
wire form that a voice should never say: braces, brackets, the Hermes tags,
an offered function's name, the JSON keys of a call, backticks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from num2words import num2words

from bench.tool_set import ToolResult

MARKERS = (
    "{",
    "}",
    "[",
    "]",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    '"name"',
    '"arguments"',
    "`",
)
# Words that tell the user something did not work; "not" covers "not found", "n't" covers "couldn't", "wasn't".
FAILURE = re.compile(
    r"\b(sorry|unfortunately|unable|cannot|not|no|error|down|fail(ed|s|ure)?|problem|issue|"
    r"unavailable|wrong)\b|n't\b|n’t\b",
    re.IGNORECASE,
)


def says_fact(text: str, fact: int | str) -> bool:
    """Whether ``text`` says ``fact``: a number as digits (21, 21.0, 1,000) or words ("twenty-one", "twenty one"),
    or any of the ``|``-separated words (at a word's start, any case)."""
    lowered = text.lower()
    if isinstance(fact, int):
        digits = r"(?<![\d.])" + re.escape(f"{fact:,}").replace(",", ",?") + r"(?!\d)"
        words = (
            re.escape(num2words(fact))
            .replace(",", ",?")
            .replace(r"\ and\ ", "[- ](and[- ])?")
            .replace(r"\ ", "[- ]")
            .replace(r"\-", "[- ]")
        )  # "six hundred and fifteen", "six-hundred fifteen"
        larger = r"(?<!hundred )(?<!thousand )(?<!hundred and )"  # "twenty-one" inside "two hundred twenty-one"
        return bool(re.search(digits, lowered) or re.search(rf"{larger}\b{words}\b", lowered))
    return any(re.search(rf"\b{re.escape(word.strip())}", lowered) for word in fact.split("|"))


def call_markup(text: str, function_names: Iterable[str]) -> list[str]:
    """The markers of a call found in ``text``: each one once, in the order of :data:`MARKERS`, then names."""
    return [m for m in (*MARKERS, *function_names) if m in text]


def in_words(text: str, result: ToolResult, function_names: Iterable[str]) -> bool:
    """A text answer that uses ``result``: non-empty, no call markup, and a key fact of it (for an error result:
    words that say it failed)."""
    if not text.strip() or call_markup(text, function_names):
        return False
    if result.error:
        return bool(FAILURE.search(text))
    return any(says_fact(text, fact) for fact in result.facts)
