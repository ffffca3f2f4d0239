"""Tool calls on llama.cpp, in the Hermes format of ``pipelines.tool_calls``.

* ``required`` or a named function: the call is certain. Its start goes in the prompt (the
  head up to the arguments for a named function, ``<tool_call>`` for "required") and
  llama.cpp's grammar, converted from the JSON Schema, holds what the model writes after it,
  decoded greedily: the call always parses, names an offered function, and has the schema's
  keys, types and numeric bounds (``_gbnf_bounds``; a schema the converter cannot express, such
  as a ``$ref`` below the root, is held only to its shape: a JSON object).
* ``auto``: the model chooses with its first tokens, unconstrained. Text goes on as it came;
  an answer that opens a call (tagged, or as the bare JSON object small models often write,
  alone or in a code block) is made again as a ``required`` call, under the grammar above, so a call made by choice
  parses and matches its schema like a forced one. A call already answered since the user
  spoke is not made again (``AutoCallStream``).
* ``none``: the answer opens with a word (``TEXT_FIRST``), never a call.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pipelines.messages import FunctionTool, ToolChoice
from pipelines.tool_calls import (
    CALL_CLOSE,
    CALL_OPEN,
    CALL_SEPARATOR,
    CALL_TAIL,
    CallEnd,
    CallParser,
    call_head,
    call_key,
    call_text,
)

logger = logging.getLogger(__name__)


class ForcedCall:
    """A call the response must make: ``head`` goes in the prompt, ``grammar`` (GBNF) holds what the model
    writes after it, and ``tail`` closes it."""

    def __init__(self, head: str, grammar: str, tail: str) -> None:
        self.head, self.grammar, self.tail = head, grammar, tail


ANY_OBJECT: dict[str, Any] = {"type": "object"}


def forced_call(tools: Sequence[FunctionTool], choice: ToolChoice) -> ForcedCall:
    """A named function: its head up to the arguments, then its schema; "required": the call object of any tool."""
    if choice.mode == "function":
        tool = next(tool for tool in tools if tool.name == choice.name)
        return ForcedCall(call_head(tool.name), _grammar(tool.parameters, ANY_OBJECT), CALL_TAIL)

    def calls(arguments: Callable[[FunctionTool], dict[str, Any]]) -> dict[str, Any]:
        return {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"name": {"const": tool.name}, "arguments": arguments(tool)},
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
                for tool in tools
            ]
        }

    grammar = _grammar(calls(lambda tool: tool.parameters), calls(lambda tool: ANY_OBJECT), ("name", "arguments"))
    return ForcedCall(CALL_OPEN + CALL_SEPARATOR, grammar, CALL_SEPARATOR + CALL_CLOSE)


def _grammar(schema: dict[str, Any], loose: dict[str, Any], order: tuple[str, ...] = ()) -> str:
    """llama.cpp's grammar of ``schema``, or of ``loose`` where its converter cannot express ``schema``
    (``$ref`` outside the root, say): the call then still parses, and names a tool it may call."""
    grammar = _gbnf(json.dumps(schema, sort_keys=True), order)
    if grammar is None:
        grammar = _gbnf(json.dumps(loose, sort_keys=True), order)
    assert grammar is not None, "the loose schema converts"
    return grammar


@functools.lru_cache(maxsize=64)
def _gbnf(schema: str, order: tuple[str, ...]) -> str | None:
    """llama.cpp's GBNF of a JSON Schema (``order``: keys written first), converted once per schema."""
    from ._gbnf_bounds import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(schema, list(order) or None)
    except Exception as exc:  # the converter raises plain Exceptions for what it cannot express
        logger.warning("a tool schema llama.cpp cannot express is held only to its shape: %s", exc)
        return None


class ForcedCallStream:
    """The stream of a forced call: the head (already in the prompt) comes out with the first piece, and
    the tail once the grammar is done. A call cut by the token limit or a cancel stays unfinished."""

    def __init__(self, stream: Any, call: ForcedCall) -> None:
        self._stream = stream
        self._call = call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __iter__(self) -> Iterator[str]:
        head = self._call.head
        for piece in self._stream:
            yield head + piece
            head = ""
        if self._stream.finish_reason == "stop" and not head:
            yield self._call.tail


MAX_PARALLEL_CALLS = 8


class CallSequence:
    """Calls in parallel (``parallel_tool_calls``): after each finished call, ``next_call`` is given all that
    was written so far and returns the stream of the next call when the model opens another one (it may
    end instead), so one response makes up to ``limit`` calls in the Hermes layout, one after the other."""

    def __init__(self, first: Any, next_call: Callable[[str], Any | None], limit: int = MAX_PARALLEL_CALLS) -> None:
        self._stream = first
        self._next = next_call
        self._limit = limit
        self.output_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __iter__(self) -> Iterator[str]:
        written = ""
        for count in range(1, self._limit + 1):
            for piece in self._stream:
                written += piece
                yield piece
            self.output_tokens += self._stream.output_tokens
            if self._stream.finish_reason != "stop" or count == self._limit:
                return
            following = self._next(written)
            if following is None:
                return
            self._stream = following


def read_opening(pieces: Iterable[str]) -> tuple[str, bool]:
    """Reads ``pieces`` until the answer's start shows a call or text: (what was read, whether it opens a call)."""
    head = ""
    for piece in pieces:
        head += piece
        opens, undecided = _opening("".join(head.split()))
        if opens or not undecided:
            return head, opens
    return head, False


def opens_another(pieces: Iterable[str]) -> bool:
    """Whether the model, after a finished call, opens another one (it may end, or write text, instead)."""
    return read_opening(pieces)[1]


# The first token of an answer that must be text: a letter or a digit, in any script (never markup, JSON, code,
# a quote, a bracket or a stray ">" left of a tag the model could not open).
TEXT_FIRST = r"""root ::= [a-zA-Z0-9\u00C0-\uFFFF] .*"""
MARKUP_FIRST = set("<{[(`\"'")
# How an answer may open a call, whitespace aside: the Hermes tag, or the bare JSON object in any wrapping small
# models put around it: a Markdown code block (Qwen2.5-Coder writes that when no system prompt tells it
# otherwise), a parenthesis, doubled braces (a Qwen2.5 GGUF whose template shows the call as ``{{"name": ...}}``).
WRAPPERS = ("```json", "```", "(", "[", "{")
BARE_CALL = '{"name"'


def _opening(compact: str) -> tuple[bool, bool]:
    """(opens a call, may still open one) for the start of an answer with its whitespace taken out."""
    if compact.startswith(CALL_OPEN):
        return True, True
    if CALL_OPEN.startswith(compact):
        return False, True
    rest = compact
    while rest:
        if rest.startswith(BARE_CALL):
            return True, True
        if BARE_CALL.startswith(rest) or any(wrapper.startswith(rest) for wrapper in WRAPPERS):
            return False, True
        wrapper = next((w for w in WRAPPERS if rest.startswith(w)), None)
        if wrapper is None:
            return False, False
        rest = rest[len(wrapper) :]
    return False, True


# Words too common to show where a value came from.
COMMON_WORDS = frozenset(
    """a an and are at be by can do for from have how i in is it its me my of on or our please
the that this to was we what when where which who why will with you your""".split()
)
WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> set[str]:
    return {word for word in WORD.findall(text.lower()) if word not in COMMON_WORDS}


class Grounding:
    """Whether a call the model chose is made of what was said: one of its free-text arguments (a string with
    no enum, pattern or format, at any depth; digits aside, as "19:00" for "seven") shares a word with the
    conversation's instructions, the user's messages or the tools' results, or it has none. A small model
    asked "Hello, how are you?" with a weather tool offered calls it for a city nobody named; a call the
    user asked for names something the user said."""

    def __init__(self, tools: Sequence[FunctionTool], messages: Sequence[dict[str, Any]]) -> None:
        self._schemas = {tool.name: tool.parameters for tool in tools}
        said = " ".join(str(m.get("content") or "") for m in messages if m["role"] in ("system", "user", "tool"))
        self._said = _words(said)

    def __call__(self, call: CallEnd) -> bool:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            return False
        worded = [
            words
            for value in _free_text(arguments, self._schemas.get(call.name, {}))
            if (words := {w for w in _words(value) if not w.isdigit()})
        ]
        return not worded or any(self._heard(word) for words in worded for word in words)

    def _heard(self, word: str) -> bool:
        """Said as it is, or as a form of it ("egg" for "eggs", "booking" for "book")."""
        return (
            word in self._said
            or len(word) >= 3
            and any(len(said) >= 3 and (said.startswith(word) or word.startswith(said)) for said in self._said)
        )


def _free_text(value: Any, schema: Any) -> Iterator[str]:
    """The string values of ``value`` that its schema leaves free (no enum, const, pattern or format)."""
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(value, str):
        if not any(key in schema for key in ("enum", "const", "pattern", "format")):
            yield value
    elif isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, item in value.items():
            yield from _free_text(item, properties.get(key, {}))
    elif isinstance(value, list):
        for item in value:
            yield from _free_text(item, schema.get("items", {}))


def current_turn(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system messages and the conversation from the user's last message on (calls and results since)."""
    last = max((i for i, message in enumerate(messages) if message["role"] == "user"), default=None)
    if last is None:
        return list(messages)
    return [message for message in messages[:last] if message["role"] == "system"] + list(messages[last:])


def _calls_since_user(messages: Sequence[dict[str, Any]]) -> Iterator[tuple[str, Any]]:
    """(name, arguments) of each call made since the user's last message, the newest first."""
    for message in reversed(messages):
        if message["role"] == "user":
            return
        for call in message.get("tool_calls") or ():
            yield call["function"]["name"], call["function"]["arguments"]


def answered_calls(messages: Sequence[dict[str, Any]]) -> set[str]:
    """The calls made since the user's last message (each followed by its result), as ``call_key`` gives them."""
    return {call_key(name, arguments) for name, arguments in _calls_since_user(messages)}


def answered_call_objects(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The calls made since the user's last message, each as the model would write it again after a call's
    opening (the object between the tags): as a chat template shows it (``tojson``: keys sorted, markup
    characters escaped) and with its arguments as they were written."""
    from jinja2.utils import htmlsafe_json_dumps

    objects: list[str] = []
    for name, arguments in _calls_since_user(messages):
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        for shown in (str(htmlsafe_json_dumps(arguments, sort_keys=True)), json.dumps(arguments)):
            text = f'{{"name": "{name}", "arguments": {shown}}}'
            if text not in objects:
                objects.append(text)
    return objects


class AutoCallStream:
    """``auto``: the model chooses between text and a call with its first tokens. Text streams as it comes;
    text that opens with markup (``MARKUP_FIRST``: a result read back as JSON, say) is made again by ``retry``.
    An answer that opens with a call (``_opening``) is stopped there and made by ``call``: the
    ``required`` call under its grammar, its opening in the prompt, so that the call parses and its
    arguments match the function's schema.

    Once calls have been answered since the user spoke (``answered``), a call is held to its end: a small
    model reading a result back often writes the same call again, and again. Such a repeat is dropped, and
    so is a call that is not ``grounded``; with no call left the answer is made by ``answer`` or ``retry``,
    which must open with a word. Where ``repeats`` can tell before the call is written that the model is
    about to write an answered call again (``LlamaCppStream.writes``: one evaluation, not a generation),
    the answer is made at once."""

    def __init__(
        self,
        stream: Any,
        answered: set[str],
        retry: Callable[[], Any],
        call: Callable[[], Any],
        answer: Callable[[], Any] | None = None,
        grounded: Callable[[CallEnd], bool] | None = None,
        repeats: Callable[[], bool] | None = None,
    ) -> None:
        """``answer``: where an answer in words comes from when the decision's own prompt is not the one to
        answer from (``_llama_plans.Plan.auto_in_a_later_turn``: the decision sees the current turn, the answer
        all of it, but after results the turn and a note);
        ``grounded``: whether a call the model chose is made of what was said (``Grounding``); one that is not
        is dropped (the call is then held until it ends, not streamed); ``repeats``: whether the call the
        model has opened is, greedily, one already answered."""
        self._grounded = grounded
        self._repeats = repeats
        self._stream = stream
        self._answered = answered
        self._retry = retry
        self._call = call
        self._answer = answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __iter__(self) -> Iterator[str]:
        pieces = iter(self._stream)
        head, opens = read_opening(pieces)
        compact = "".join(head.split())
        if not opens and compact[:1] not in MARKUP_FIRST and self._answer is None:
            if head:
                yield head
            yield from pieces
            return
        close = getattr(pieces, "close", None)
        if close is not None:
            close()  # its context goes back before the next generation takes one
        if not opens:  # words, made from the answer's prompt; never markup (a result read back)
            self._stream = (self._answer or self._retry)()
            yield from self._stream
            return
        if self._answered and self._repeats is not None and self._repeats():
            logger.info("the model began a call already answered: the answer is made instead")
            self._stream = (self._answer or self._retry)()
            yield from self._stream
            return
        self._stream = self._call()
        if not self._answered and self._grounded is None:
            yield from self._stream
            return
        text = "".join(self._stream)
        if self._stream.finish_reason != "stop":
            yield text
            return
        calls = self._calls(text)
        kept = [call for call in calls if call_key(call.name, call.arguments) not in self._answered]
        if len(kept) < len(calls):
            logger.info("a call already answered was written again: it is dropped")
        if self._grounded is not None:
            made_up = [call for call in kept if not self._grounded(call)]
            if made_up:
                logger.info("a call with arguments nobody said was dropped: %s", made_up[0].name)
            kept = [call for call in kept if call not in made_up]
        if len(kept) == len(calls):
            yield text
            return
        if kept:
            yield "\n".join(call_text(call.name, call.arguments) for call in kept)
            return
        self._stream = (self._answer or self._retry)()  # no call left to make: the answer, in words
        yield from self._stream

    @staticmethod
    def _calls(text: str) -> list[CallEnd]:
        parser = CallParser()
        return [event for event in [*parser.feed(text), *parser.finish()] if isinstance(event, CallEnd)]
