"""The language model stage: holds the conversation and streams responses."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Protocol

from pipelines.ids import new_id
from pipelines.messages import (
    AddItem,
    DeleteItem,
    Downstream,
    HistoryItem,
    Message,
    ResponseEnd,
    ResponseRequest,
    ResponseStarted,
    TextDelta,
    TextForSpeech,
    TruncateItem,
    UserTurn,
)
from pipelines.stages.base import CancelFlag, SessionContext, Stage
from pipelines.text import SentenceSplitter

logger = logging.getLogger(__name__)


class LMStream(Protocol):
    input_tokens: int
    output_tokens: int

    def __iter__(self) -> Iterator[str]: ...


class LanguageModel(Protocol):
    context_length: int

    def count_tokens(self, messages: list[dict[str, str]]) -> int: ...

    def generate_stream(self, messages: list[dict[str, str]], max_new_tokens: int, temperature: float,
                        cancel: object | None = None, **options: object) -> LMStream: ...


def request_from_settings(context: SessionContext, generation: int) -> ResponseRequest:
    s = context.settings
    return ResponseRequest(
        generation=generation,
        response_id=new_id("resp"),
        instructions=s.instructions,
        output_modalities=s.output_modalities,
        max_output_tokens=s.max_output_tokens,
        voice=s.voice,
        output_format=s.output_format,
        temperature=s.temperature,
    )


class LmStage(Stage):
    name = "lm"

    def __init__(self, context: SessionContext, model: LanguageModel, max_new_tokens: int = 128,
                 first_piece_words: int = 4) -> None:
        super().__init__(context)
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.first_piece_words = first_piece_words
        self.history: dict[str, HistoryItem] = {}
        # speculative turn -> the item ids it added, taken back if the turn is abandoned
        self._speculative: dict[str, list[str]] = {}
        self._prefix = self._new_prefix()

    def _new_prefix(self) -> object | None:
        """The conversation's KV cache between turns, where the engine keeps one."""
        make = getattr(self.model, "new_prefix_cache", None)
        return make() if make is not None else None

    def on_session_end(self) -> None:
        self.history = {}
        self._speculative = {}
        self._prefix = self._new_prefix()

    def process(self, msg: Downstream) -> Iterator[Message]:
        self._settle_speculation()
        if isinstance(msg, UserTurn):
            if msg.text:
                self.history.pop(msg.item_id, None)  # a later round of the same turn replaces it
                self.history[msg.item_id] = HistoryItem(msg.item_id, "user", msg.text)
                if msg.turn:
                    self._speculative[msg.turn] = [msg.item_id]
            if msg.create_response or msg.response is not None:
                req = msg.response or request_from_settings(self.context, msg.generation)
                yield from self._respond(req, msg.turn)
        elif isinstance(msg, ResponseRequest):
            yield from self._respond(msg)
        elif isinstance(msg, AddItem):
            self._add(msg)
        elif isinstance(msg, DeleteItem):
            self.history.pop(msg.item_id, None)
        elif isinstance(msg, TruncateItem):
            item = self.history.get(msg.item_id)
            if item is not None:
                self.history[msg.item_id] = HistoryItem(item.item_id, item.role, msg.text)
        else:
            yield msg

    def _settle_speculation(self) -> None:
        """Forgets confirmed speculative turns and takes back the items of abandoned ones."""
        for turn in list(self._speculative):
            if self.context.turn_abandoned(turn):
                for item_id in self._speculative.pop(turn):
                    self.history.pop(item_id, None)
            elif self.context.turn_confirmed(turn):
                del self._speculative[turn]

    def _add(self, msg: AddItem) -> None:
        if msg.previous_item_id is None or msg.previous_item_id not in self.history:
            self.history[msg.item.item_id] = msg.item
            return
        items = list(self.history.items())
        at = [key for key, _ in items].index(msg.previous_item_id) + 1
        items.insert(at, (msg.item.item_id, msg.item))
        self.history = dict(items)

    def _messages(self, req: ResponseRequest) -> list[dict[str, str]]:
        turns = req.extra_input if req.out_of_band and req.extra_input else tuple(self.history.values())
        system = [{"role": "system", "content": req.instructions}] if req.instructions else []
        messages = [{"role": item.role, "content": item.text} for item in turns if item.text]
        budget = self.model.context_length - self._max_tokens(req)
        # Oldest turns go first when the conversation outgrows the model's context.
        while len(messages) > 1 and self.model.count_tokens(system + messages) > budget:
            messages.pop(0)
        return system + messages

    def _max_tokens(self, req: ResponseRequest) -> int:
        if req.max_output_tokens is None:
            return self.max_new_tokens
        return max(1, min(req.max_output_tokens, self.max_new_tokens))

    def _respond(self, req: ResponseRequest, turn: str = "") -> Iterator[Message]:
        gen = req.generation
        item_id = req.item_id or new_id("item")
        yield ResponseStarted(generation=gen, response_id=req.response_id, item_id=item_id,
                              output_modalities=req.output_modalities, output_format=req.output_format,
                              voice=req.voice, out_of_band=req.out_of_band, turn=turn)
        speak = "audio" in req.output_modalities
        cancel = CancelFlag(self.context, req.response_id, gen, turn)
        started = time.perf_counter()
        first_token_s: float | None = None
        text_parts: list[str] = []
        status, reason = "completed", None
        stream = None
        try:
            # An out-of-band response has its own prompt: it would only displace the conversation's cache.
            options = {"prefix": self._prefix} if self._prefix is not None and not req.out_of_band else {}
            stream = self.model.generate_stream(self._messages(req), self._max_tokens(req), req.temperature, cancel,
                                                **options)
            splitter = SentenceSplitter(first_words=self.first_piece_words)
            for piece in self._pieces(stream, cancel):
                if first_token_s is None:
                    first_token_s = time.perf_counter() - started
                text_parts.append(piece)
                if speak:
                    for sentence in splitter.feed(piece):
                        yield TextForSpeech(generation=gen, response_id=req.response_id, text=sentence,
                                            voice=req.voice, output_format=req.output_format, turn=turn)
                else:
                    yield TextDelta(generation=gen, response_id=req.response_id, delta=piece, turn=turn)
            if cancel.is_set():
                status, reason = "cancelled", "turn_detected"
            elif speak and (rest := splitter.flush()):
                yield TextForSpeech(generation=gen, response_id=req.response_id, text=rest,
                                    voice=req.voice, output_format=req.output_format, turn=turn)
            if status == "completed" and stream.output_tokens >= self._max_tokens(req):
                status, reason = "incomplete", "max_output_tokens"
        except Exception as exc:
            logger.exception("generation failed")
            status, reason = "failed", f"{type(exc).__name__}: {exc}"
        text = "".join(text_parts).strip()
        if text and not req.out_of_band and not (turn and self.context.turn_abandoned(turn)):
            self.history[item_id] = HistoryItem(item_id, "assistant", text)
            if turn in self._speculative:
                self._speculative[turn].append(item_id)
        yield ResponseEnd(generation=gen, response_id=req.response_id, status=status, reason=reason,
                          input_tokens=getattr(stream, "input_tokens", 0), output_tokens=getattr(stream, "output_tokens", 0),
                          lm_first_token_s=first_token_s, turn=turn)

    @staticmethod
    def _pieces(stream: Iterable[str], cancel: CancelFlag) -> Iterator[str]:
        for piece in stream:
            if cancel.is_set():
                return
            if piece:
                yield piece
