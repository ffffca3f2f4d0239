"""How one response is made on llama.cpp: a plan per ``tool_choice``, each a few named steps.

``LlamaCppLM.generate_stream`` hands its request to :func:`plan`, which picks the plan (``PLANS``): no tools,
``none``, ``required`` or a named function (``forced``), ``auto``. The steps they share make a stream on the
engine's contexts (``stream``), a forced call and the calls in parallel after it (``calls``), and an answer in
words from the answer model (``in_words``). How each ``tool_choice`` is held on llama.cpp: ``_llama_tools``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pipelines.interfaces import Cancel
from pipelines.messages import FunctionTool, ToolChoice
from pipelines.tool_calls import CALL_OPEN, CALL_SEPARATOR

from ._llama_contexts import ConversationCache, LlamaContexts
from ._llama_stream import LlamaCppStream
from ._llama_tools import (
    TEXT_FIRST,
    AutoCallStream,
    CallSequence,
    ForcedCall,
    ForcedCallStream,
    Grounding,
    answered_call_objects,
    answered_calls,
    current_turn,
    forced_call,
    opens_another,
)

ANSWER_FROM_RESULTS = {
    "role": "system",
    "content": "The results are above. Now answer the user in words, using them; do not call a function again.",
}
MIN_CALL_TOKENS = 16  # calls in parallel: another is not begun with fewer tokens left than this

Response = LlamaCppStream | ForcedCallStream | AutoCallStream | CallSequence


class Engine(Protocol):
    """What a plan needs of the engine (``LlamaCppLM``): its contexts, the chat template, the tokenizer."""

    contexts: LlamaContexts
    context_length: int

    @property
    def answerer(self) -> Engine | None: ...

    def encode_chat(self, messages: list[dict[str, Any]], tools: Sequence[FunctionTool] = ()) -> list[int]: ...

    def tokens(self, text: str) -> list[int]: ...

    def fitting(self, ids: list[int]) -> list[int]: ...


@dataclasses.dataclass(frozen=True)
class Request:
    """One ``generate_stream`` call's arguments."""

    messages: list[dict[str, Any]]
    max_new_tokens: int
    temperature: float = 0.8
    cancel: Cancel | None = None
    seed: int | None = None
    prefix: ConversationCache | None = None
    tools: Sequence[FunctionTool] = ()
    tool_choice: ToolChoice = ToolChoice()
    parallel_tool_calls: bool = True


def plan(engine: Engine, request: Request) -> Response:
    """The response to ``request`` on ``engine``, by the plan for its ``tool_choice`` (``PLANS``)."""
    steps = Plan(engine, request)
    if not request.tools:
        return steps.without_tools()
    return PLANS[request.tool_choice.mode](steps)


class Plan:
    """The steps of one response: its prompt (``prompt_ids``, fitted to the context), the streams made from it,
    and one method per plan. ``separate``: a second model (``Engine.answerer``) answers in words."""

    def __init__(self, engine: Engine, request: Request) -> None:
        self.engine = engine
        self.request = request
        self.prompt_ids = engine.fitting(engine.encode_chat(request.messages, request.tools))
        self.separate = engine.answerer is not None

    # --- the plans ------------------------------------------------------------------------------------------------

    def without_tools(self) -> Response:
        if self.separate:
            return self.in_words(self.request.messages)
        return self.stream(self.prompt_ids, self.request.prefix)

    def no_call(self) -> Response:
        """``none``: the answer opens with a word (``TEXT_FIRST``), never a call."""
        if self.separate:
            return self.in_words(self.request.messages)
        return self.stream(self.prompt_ids, self.request.prefix, first=TEXT_FIRST)

    def forced(self) -> Response:
        """``required`` or a named function: the call under its grammar (``calls``)."""
        return self.calls(self.request.tool_choice, self.prompt_ids, self.request.prefix)

    def auto(self) -> Response:
        """``auto``: the model chooses between words and a call (``AutoCallStream``).

        In a conversation with earlier turns, whether to call, and the call, are made from the current turn alone
        (the instructions, the tools, the user's last message and what followed it), on a context of their own
        (``ConversationCache.turn``); an answer in words is made from the whole conversation. A small model that
        sees earlier turns tends to answer new requests the way it answered old ones, calls or not."""
        messages = self.request.messages
        turn = current_turn(messages)
        if len(turn) < len(messages):
            return self.auto_in_a_later_turn(turn)
        prefix = self.request.prefix
        return AutoCallStream(
            self.stream(self.prompt_ids, prefix),
            self.answered,
            self.words,
            lambda: self.calls(ToolChoice("required"), self.prompt_ids, prefix),
            answer=self.words if self.separate else None,
            grounded=Grounding(self.request.tools, messages),
            repeats=self.repeats(self.prompt_ids, prefix),
        )

    def auto_in_a_later_turn(self, turn: list[dict[str, Any]]) -> Response:
        """``auto`` with earlier turns: the decision and the calls from ``turn`` alone, on the turn's context."""
        turn_ids = self.engine.encode_chat(turn, self.request.tools)
        prefix = self.request.prefix
        on = None if prefix is None else prefix.for_turn()
        from_the_turn = functools.partial(self.answer_from_the_turn, turn, on)
        return AutoCallStream(
            self.stream(turn_ids, on),
            self.answered,
            from_the_turn,
            lambda: self.calls(ToolChoice("required"), turn_ids, on),
            answer=from_the_turn,
            grounded=Grounding(self.request.tools, self.request.messages),
            repeats=self.repeats(turn_ids, on),
        )

    # --- the steps ------------------------------------------------------------------------------------------------

    def stream(
        self, ids: list[int], on: ConversationCache | None, max_tokens: int | None = None, **grammars: str | None
    ) -> LlamaCppStream:
        """A generation of ``ids`` on the context ``on`` caches, at most ``max_tokens`` (the request's) and what
        the context has room for; ``grammars``: ``LlamaCppStream``'s ``grammar`` and ``first``."""
        request = self.request
        most = request.max_new_tokens if max_tokens is None else max_tokens
        left = self.engine.context_length - len(self.engine.fitting(ids))
        return LlamaCppStream(
            self.engine.contexts,
            ids,
            min(most, left),
            request.temperature,
            request.cancel,
            request.seed,
            on,
            **grammars,
        )

    def calls(
        self, choice: ToolChoice, base: list[int], on: ConversationCache | None
    ) -> ForcedCallStream | CallSequence:
        """The call ``choice`` forces after ``base``; with ``parallel_tool_calls`` (and not a named function), the
        calls the model opens after it, one after the other."""
        if not self.request.parallel_tool_calls or choice.mode == "function":
            return self.call(choice, base, on)
        return CallSequence(self.call(choice, base, on), lambda written: self.next_call(choice, base, on, written))

    def call(
        self, choice: ToolChoice, base: list[int], on: ConversationCache | None, written: str = ""
    ) -> ForcedCallStream:
        """One forced call after ``base`` and the calls ``written`` before it (the next of calls in parallel)."""
        forced = forced_call(self.request.tools, choice)
        if written:
            forced = ForcedCall("\n" + forced.head, forced.grammar, forced.tail)
        ids = base + self.engine.tokens(written + forced.head)
        left = self.request.max_new_tokens - len(self.engine.tokens(written))
        return ForcedCallStream(self.stream(ids, on, left, grammar=forced.grammar), forced)

    def next_call(
        self, choice: ToolChoice, base: list[int], on: ConversationCache | None, written: str
    ) -> ForcedCallStream | None:
        """The next call where the model, after the calls ``written``, opens another (and there is room for it)."""
        if self.request.max_new_tokens - len(self.engine.tokens(written)) < MIN_CALL_TOKENS:
            return None
        pieces = iter(self.stream(base + self.engine.tokens(written), on, 4))
        try:
            if not opens_another(pieces):
                return None
        finally:
            pieces.close()  # its context goes back before the next call's generation takes one
        return self.call(choice, base, on, written)

    def in_words(self, conversation: list[dict[str, Any]]) -> Response:
        """The answer model's answer, in words, on its own contexts."""
        request = self.request
        prefix = request.prefix
        return plan(
            self.engine.answerer or self.engine,
            Request(
                conversation,
                request.max_new_tokens,
                request.temperature,
                request.cancel,
                request.seed,
                None if prefix is None else prefix.for_answers(),
                tools=request.tools,
                tool_choice=ToolChoice("none") if request.tools else ToolChoice(),
            ),
        )

    @functools.cached_property
    def answered(self) -> set[str]:
        """The calls made since the user spoke, each answered by its result (``_llama_tools.answered_calls``)."""
        return answered_calls(self.request.messages)

    def words(self) -> Response:
        """An answer in words from the whole conversation; after results, told so at the end of its prompt (a small
        model reading a result back tends to call the function again, and, kept from that, to describe the
        call instead)."""
        messages = self.request.messages
        if self.separate:
            return self.in_words([*messages, ANSWER_FROM_RESULTS] if self.answered else messages)
        if not self.answered:
            return self.stream(self.prompt_ids, self.request.prefix, first=TEXT_FIRST)
        ids = self.engine.encode_chat([*messages, ANSWER_FROM_RESULTS], self.request.tools)
        return self.stream(ids, self.request.prefix, first=TEXT_FIRST)

    def answer_from_the_turn(self, turn: list[dict[str, Any]], on: ConversationCache | None) -> Response:
        """After results, the answer from the turn's own context: it has read the request, the calls and the
        results already (the decision's prompt), so only the note is left to read; the calls and their arguments
        were made from the turn alone too. Before any result, from the whole conversation (``words``)."""
        if self.separate or not self.answered:
            return self.words()
        ids = self.engine.encode_chat([*turn, ANSWER_FROM_RESULTS], self.request.tools)
        return self.stream(ids, on, first=TEXT_FIRST)

    def repeats(self, base: list[int], on: ConversationCache | None) -> Callable[[], bool]:
        """Whether the call the decision opened on ``base`` would, greedily, be one already answered."""

        def check() -> bool:
            opened = base + self.engine.tokens(CALL_OPEN + CALL_SEPARATOR)  # the head of a "required" call
            answered = [self.engine.tokens(text) for text in answered_call_objects(self.request.messages)]
            return self.stream(opened, on).writes(answered)

        return check


PLANS: dict[str, Callable[[Plan], Response]] = {
    "auto": Plan.auto,
    "none": Plan.no_call,
    "required": Plan.forced,
    "function": Plan.forced,
}
