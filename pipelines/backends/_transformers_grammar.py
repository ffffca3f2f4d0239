"""Constrained decoding of tool calls with xgrammar.

One grammar per (tools, tool choice), built from xgrammar structural tags and
compiled once for the tokenizer (xgrammar caches compiled grammars):

* ``required``: one call of any of the tools, nothing else;
* a named function: one call of it;
* ``auto``: either a call, as above, or text that does not start with ``<`` and
  never contains ``<tool_call>``. The first token is the decision step: ``<``
  starts a call (the text branch cannot begin with it), anything else is text;
* ``none``: text that never contains ``<tool_call>``.

Each call is ``<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>``
with ARGS matching the function's JSON Schema, so a response is either spoken
text or a call, never both, and the arguments always parse and validate.
One call per response unless ``parallel`` (``parallel_tool_calls``): then the
model may write further calls after the first, separated by a newline.
Inside a call, decoding is greedy (arguments are data, not prose).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from pipelines.messages import FunctionTool, ToolChoice
from pipelines.tool_calls import CALL_OPEN, CALL_SEPARATOR, CALL_TAIL, call_head

# Consecutive whitespace allowed inside the JSON of arguments: a small model
# left free would sometimes pad with newlines until the token limit.
MAX_JSON_WHITESPACE = 1
COMPILED_CACHE_BYTES = 64 * 1024 * 1024


def structural_tag(tools: Sequence[FunctionTool], choice: ToolChoice, parallel: bool = False) -> dict[str, Any]:
    """The xgrammar structural tag (as JSON) of ``tools`` under ``choice``."""
    text = {"type": "any_text", "excludes": [CALL_OPEN]}
    if choice.mode == "none" or not tools:
        return {"type": "structural_tag", "format": text}
    chosen = [t for t in tools if t.name == choice.name] if choice.mode == "function" else list(tools)
    calls = {
        "type": "tags_with_separator",
        "tags": [_tag(tool) for tool in chosen],
        "separator": CALL_SEPARATOR,
        "at_least_one": True,
        "stop_after_first": not parallel or choice.mode == "function",
    }
    if choice.mode in ("required", "function"):
        return {"type": "structural_tag", "format": calls}
    not_a_call = {"type": "sequence", "elements": [{"type": "regex", "pattern": "[^<]"}, text]}
    return {"type": "structural_tag", "format": {"type": "or", "elements": [calls, not_a_call]}}


def _tag(tool: FunctionTool) -> dict[str, Any]:
    return {
        "type": "tag",
        "begin": call_head(tool.name),
        "end": CALL_TAIL,
        "content": {"type": "json_schema", "json_schema": tool.parameters, "max_whitespace_cnt": MAX_JSON_WHITESPACE},
    }


class ToolGrammars:
    """Compiles tool grammars for one tokenizer; shared by every unit using the model."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Sequence[int]) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_ids))
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_limit_bytes=COMPILED_CACHE_BYTES)
        self._lock = threading.Lock()
        self._tokenizer = tokenizer

    def constraint(self, tools: Sequence[FunctionTool], choice: ToolChoice, parallel: bool = False) -> ToolConstraint:
        tag = json.dumps(structural_tag(tools, choice, parallel), sort_keys=True)
        with self._lock:  # the compiler's cache is filled under one lock; matching runs unlocked
            compiled = self._compiler.compile_structural_tag(tag)
        calls_only = bool(tools) and choice.mode in ("required", "function")
        decides = bool(tools) and choice.mode == "auto"
        return ToolConstraint(self._xgr, compiled, self.vocab_size, calls_only, decides, self._tokenizer)


class ToolConstraint:
    """The grammar's state during one generation: masks logits, follows the sampled tokens."""

    def __init__(
        self, xgr: Any, compiled: Any, vocab_size: int, calls_only: bool, decides: bool, tokenizer: Any
    ) -> None:
        self._xgr = xgr
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._vocab_size = vocab_size
        self._decides = decides
        self._tokenizer = tokenizer
        self.in_call = calls_only  # greedy from here on

    def mask(self, logits: Any) -> None:
        """Sets the logits of tokens the grammar forbids now to -inf (in place, shape [1, vocab])."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        self._xgr.apply_token_bitmask_inplace(logits, self._bitmask, vocab_size=self._vocab_size)

    def accept(self, token: int) -> None:
        if not self._matcher.accept_token(token):
            raise RuntimeError(f"token {token} breaks the tool-call grammar")
        if self._decides:
            self._decides = False
            self.in_call = self._tokenizer.decode([token]).startswith("<")
