"""How the LM sees tools and writes calls, and a streaming parser of what it writes.

The call format is the Hermes one (Qwen2.5, Hermes 2/3, SmolLM3 use it)::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

A chat template that knows tools (it reads a ``tools`` variable) renders the
tools and the history's calls and results itself, from the standard
transformers message shapes that :func:`chat_messages` builds. For a template
that does not, :func:`plain_messages` writes the same content as text: the
tools in the system message inside ``<tools></tools>``, earlier calls as the
assistant's ``<tool_call>`` text, and results as ``tool`` messages inside
``<tool_response></tool_response>``. Either way the constrained decoder makes
the model write exactly the layout above, which :class:`CallParser` reads.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.messages import FunctionCallItem, FunctionCallOutputItem, FunctionTool, HistoryEntry, HistoryItem

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
CALL_SEPARATOR = "\n"
HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"\s*,\s*"arguments"\s*:\s*')
MAX_HEAD_CHARS = 200

SYSTEM_TOOLS = """You can call functions to act for the user. They are described in JSON Schema inside <tools></tools>:
<tools>
{tools}
</tools>
When the user asks for something a function does, answer with only the call:
<tool_call>
{{"name": "<function name>", "arguments": <arguments as a JSON object>}}
</tool_call>
Otherwise answer the user directly. A function's result comes back inside <tool_response></tool_response>; \
then tell the user the result in a short spoken sentence."""


def call_head(name: str) -> str:
    """What a call of ``name`` looks like up to its arguments."""
    return f'{CALL_OPEN}\n{{"name": "{name}", "arguments": '


CALL_TAIL = "}\n" + CALL_CLOSE


def call_text(name: str, arguments: str) -> str:
    """One call as the model writes it."""
    return call_head(name) + arguments + CALL_TAIL


def call_key(name: str, arguments: Any) -> str:
    """One call, whatever the spacing and key order of its arguments."""
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    return name + "\n" + json.dumps(arguments, sort_keys=True)


def tool_schema(tool: FunctionTool) -> dict[str, Any]:
    """The tool in the shape chat templates take (``tools=`` of ``apply_chat_template``)."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _arguments_value(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments  # a client-created call may carry anything; shown as it is


def chat_messages(entries: Iterable[HistoryEntry]) -> list[dict[str, Any]]:
    """The conversation in transformers' chat shape; consecutive calls form one assistant message."""
    messages: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for entry in entries:
        if isinstance(entry, HistoryItem):
            if entry.text:
                messages.append({"role": entry.role, "content": entry.text})
        elif isinstance(entry, FunctionCallItem):
            names[entry.call_id] = entry.name
            call = {
                "id": entry.call_id,
                "type": "function",
                "function": {"name": entry.name, "arguments": _arguments_value(entry.arguments)},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls") and not last["content"]:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            if entry.output is not None:  # a call the server ran: its result follows it
                messages.append(
                    {"role": "tool", "tool_call_id": entry.call_id, "name": entry.name, "content": entry.output}
                )
        elif isinstance(entry, FunctionCallOutputItem):
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": entry.call_id,
                    "name": names.get(entry.call_id, ""),
                    "content": entry.output,
                }
            )
    return messages


def plain_messages(messages: Sequence[dict[str, Any]], tools: Sequence[FunctionTool]) -> list[dict[str, str]]:
    """``messages`` with tools, calls and results written out as text, for a template without tool support."""
    out: list[dict[str, str]] = []
    for message in messages:
        if message.get("tool_calls"):
            calls = [
                CALL_OPEN
                + "\n"
                + json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
                + "\n"
                + CALL_CLOSE
                for c in message["tool_calls"]
            ]
            text = "\n".join(([message["content"]] if message.get("content") else []) + calls)
            out.append({"role": "assistant", "content": text})
        elif message["role"] == "tool":
            out.append({"role": "tool", "content": f"<tool_response>\n{message['content']}\n</tool_response>"})
        else:
            out.append({"role": message["role"], "content": message["content"]})
    if tools:
        listing = "\n".join(json.dumps(tool_schema(tool)) for tool in tools)
        prompt = SYSTEM_TOOLS.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


# --- reading the output ------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Text for the user (spoken, or sent as text)."""

    text: str


@dataclass(frozen=True)
class CallStart:
    name: str


@dataclass(frozen=True)
class ArgumentsPiece:
    text: str


@dataclass(frozen=True)
class CallEnd:
    name: str
    arguments: str


ParsedPiece = Text | CallStart | ArgumentsPiece | CallEnd


class CallParser:
    """Splits streamed model output into user text and calls, piece by piece.

    Text that might be the start of ``<tool_call>`` is held back until it is
    clearly not, so no part of a call is ever given out as text. A call's
    arguments stream as they come and end where their JSON object closes.
    Anything malformed inside a call (possible only without a constraint) is
    dropped, never spoken.
    """

    def __init__(self) -> None:
        self._state = "text"  # text | head | args | tail
        self._buffer = ""
        self._name = ""
        self._arguments: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escape = False

    @property
    def in_call(self) -> bool:
        """Whether a call has started and not ended (what a cancel would cut)."""
        return self._state in ("head", "args")

    def feed(self, piece: str) -> Iterator[ParsedPiece]:
        self._buffer += piece
        while self._buffer:
            before = (self._state, len(self._buffer))
            yield from getattr(self, f"_{self._state}")()
            if (self._state, len(self._buffer)) == before:
                return  # needs more input

    def finish(self) -> Iterator[ParsedPiece]:
        """The end of the output: held-back text goes out; an unfinished call is dropped."""
        if self._state == "text" and self._buffer:
            yield Text(self._buffer)
        self._buffer = ""

    def _text(self) -> Iterator[ParsedPiece]:
        at = self._buffer.find(CALL_OPEN)
        if at >= 0:
            if at:
                yield Text(self._buffer[:at])
            self._buffer = self._buffer[at + len(CALL_OPEN) :]
            self._state = "head"
            return
        keep = _partial_suffix(self._buffer, CALL_OPEN)
        ready = self._buffer[: len(self._buffer) - keep]
        if ready:
            yield Text(ready)
            self._buffer = self._buffer[len(ready) :]

    def _head(self) -> Iterator[ParsedPiece]:
        match = HEAD.match(self._buffer)
        if match is None:
            if len(self._buffer) > MAX_HEAD_CHARS or CALL_CLOSE in self._buffer:
                self._state = "tail"
            yield from ()
            return
        self._name = match.group(1)
        self._buffer = self._buffer[match.end() :]
        self._arguments, self._depth, self._in_string, self._escape = [], 0, False, False
        self._state = "args"
        yield CallStart(self._name)

    def _args(self) -> Iterator[ParsedPiece]:
        if not self._arguments:
            self._buffer = self._buffer.lstrip()
            if self._buffer[:1] not in ("{", ""):
                self._state = "tail"  # arguments must be an object
            if self._buffer[:1] != "{":
                return
        end = self._scan()
        piece, self._buffer = (self._buffer, "") if end is None else (self._buffer[:end], self._buffer[end:])
        if piece:
            self._arguments.append(piece)
            yield ArgumentsPiece(piece)
        if end is not None:
            self._state = "tail"
            yield CallEnd(self._name, "".join(self._arguments))

    def _scan(self) -> int | None:
        """Where the arguments' JSON value closes in the buffer (exclusive), or None."""
        for index, char in enumerate(self._buffer):
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif char == "\\":
                    self._escape = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return index + 1
        return None

    def _tail(self) -> Iterator[ParsedPiece]:
        at = self._buffer.find(CALL_CLOSE)
        if at < 0:
            keep = _partial_suffix(self._buffer, CALL_CLOSE)
            self._buffer = self._buffer[len(self._buffer) - keep :] if keep else ""
            return
        self._buffer = self._buffer[at + len(CALL_CLOSE) :].lstrip("\n")
        self._state = "text"
        yield from ()


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that begins ``marker``."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


# --- what the user may hear ---------------------------------------------------

MAX_TAG_CHARS = 40


class MarkupFilter:
    """Keeps call markup out of an answer that is heard or shown to the user, as it streams.

    A small model reading a result back may write part of a call as text (``({"name": ...})``, a
    ``<tool_response>`` tag, a function's name). Whatever the parser did not take as a call is
    filtered here: JSON objects and arrays (every bracketed span), tags, backticks, a pair of
    brackets left empty, and the offered functions' names, said as words (``get_weather`` ->
    "get weather"). A span still open at the end (cut by the token limit) is dropped.
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names = {name: name.replace("_", " ") for name in names}
        self._depth = 0  # inside {...} or [...]
        self._tag = ""  # from a "<" until it proves a tag or not
        self._paren = ""  # an "(" and the spaces after it, until what follows shows it is not left empty
        self._word = ""  # the word being written, until it ends (a function's name is said as words)

    def feed(self, text: str) -> str:
        out: list[str] = []
        for char in text:
            self._char(char, out)
        return "".join(out)

    def finish(self) -> str:
        """What was held back, less an unfinished span or tag."""
        out: list[str] = []
        if self._tag and not self._depth:
            self._emit(self._tag, out)
        self._depth, self._tag = 0, ""
        self._flush_word(out)
        out.append(self._paren)
        self._paren = ""
        return "".join(out)

    def _char(self, char: str, out: list[str]) -> None:
        if self._depth:
            self._depth += 1 if char in "{[" else -1 if char in "}]" else 0
            return
        if self._tag:
            self._tag += char
            if char == ">":
                self._tag = ""  # a tag: dropped
            elif (
                (len(self._tag) == 2 and not (char.isalpha() or char in "/_|"))
                or char == "\n"
                or len(self._tag) > MAX_TAG_CHARS
            ):
                tag, self._tag = self._tag, ""
                self._emit(tag, out)  # not a tag after all: "a < b"
            return
        if char in "{[":
            self._depth = 1
        elif char == "<":
            self._tag = char
        elif char != "`":
            self._emit(char, out)

    def _emit(self, text: str, out: list[str]) -> None:
        for char in text:
            if char.isalnum() or char == "_":
                self._word += char
                continue
            self._flush_word(out)
            if self._paren:
                if char.isspace():
                    self._paren += char
                    continue
                if char == ")":
                    self._paren = ""  # "()" once its contents were taken out
                    continue
                out.append(self._paren)
                self._paren = ""
            if char == "(":
                self._paren = char
            else:
                out.append(char)

    def _flush_word(self, out: list[str]) -> None:
        if not self._word:
            return
        if self._paren:
            out.append(self._paren)
            self._paren = ""
        out.append(self._names.get(self._word, self._word))
        self._word = ""
