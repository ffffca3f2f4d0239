"""One response of the LM stage: its rounds (``ResponseRun``), its token counts, and what its streamed model output
becomes (``ResponseOutput``): text to speak or send, and function calls."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from pipelines.ids import new_id
from pipelines.messages import (
    FunctionCallArgumentsDelta,
    FunctionCallDone,
    FunctionCallItem,
    FunctionCallStarted,
    ResponseRequest,
    StageOutput,
    TextDelta,
    TextForSpeech,
    ToolChoice,
)
from pipelines.spoken import for_reading
from pipelines.text import SentenceSplitter
from pipelines.timeline import Timeline
from pipelines.tool_calls import ArgumentsPiece, CallEnd, CallParser, CallStart, MarkupFilter, Text, call_key


@dataclass
class TokenCounts:
    """The tokens a response read (``input``, of which ``cached`` came from a cache) and wrote, over its rounds."""

    input: int = 0
    output: int = 0
    cached: int = 0

    def add(self, stream: object) -> None:
        """Adds one round's counts, as its stream gives them (none: a round that failed before it began)."""
        self.input += getattr(stream, "input_tokens", 0)
        self.output += getattr(stream, "output_tokens", 0)
        self.cached += getattr(stream, "cached_tokens", 0)


# Rounds of server-run calls one response may make; past them the model must answer without calling.
MAX_TOOL_ROUNDS = 4


@dataclass
class ResponseRun:
    """One response across its rounds: generation, a pause for the server's calls, generation again."""

    req: ResponseRequest
    turn: str
    item_id: str
    started: float = field(default_factory=time.perf_counter)
    first_token_s: float | None = None
    rounds: int = 0
    tokens: TokenCounts = field(default_factory=TokenCounts)  # over all its rounds
    timeline: Timeline | None = None  # of the user turn it answers (pipelines/timeline.py)

    def round_request(self) -> ResponseRequest:
        """The request of this round: past ``MAX_TOOL_ROUNDS`` the model must answer without calling; after the
        round that made a call it had to make (``required``, a named function), it may answer."""
        if self.rounds >= MAX_TOOL_ROUNDS:
            return replace(self.req, tool_choice=ToolChoice(mode="none"))
        if self.rounds and self.req.tool_choice.mode in ("required", "function"):
            return replace(self.req, tool_choice=ToolChoice())
        return self.req


class ResponseOutput:
    """Routes model output: text to TTS (or as text deltas), calls to the session as call messages.

    Call text never reaches TTS: the parser takes it out of the stream, a call of a
    function the response did not offer (possible only if the model writes one
    unconstrained) is dropped whole, and when tools are offered the text itself goes
    through a ``MarkupFilter`` (what a small model may write of a call as text).
    """

    def __init__(
        self, req: ResponseRequest, turn: str, first_piece_words: int, timeline: Timeline | None = None
    ) -> None:
        self._req, self._turn, self._timeline = req, turn, timeline
        self._speak = "audio" in req.output_modalities
        self._splitter = SentenceSplitter(first_words=first_piece_words)
        self._parser = CallParser()
        self._callable = {t.name for t in req.tools} if req.tool_choice.mode != "none" else set()
        self._filter = MarkupFilter(t.name for t in req.tools) if req.tools else None
        self._open: tuple[str, str, str] | None = None
        self._held: list[StageOutput] | None = None  # a later call's messages, until it proves not to be a repeat
        self._made: set[str] = set()
        self.repeated = False  # the model wrote a call it had made already in this response: time to stop
        self.text_parts: list[str] = []
        self.calls: list[FunctionCallItem] = []

    @property
    def text(self) -> str:
        return "".join(self.text_parts).strip()

    def feed(self, piece: str) -> Iterator[StageOutput]:
        for event in self._parser.feed(piece):
            yield from self._route(event)

    def finish(self, completed: bool) -> Iterator[StageOutput]:
        """The end of the output; the last words go out only if the response was not cancelled."""
        for event in self._parser.finish():
            if completed:
                yield from self._route(event)
            elif isinstance(event, Text):
                self.text_parts.append(self._filter.feed(event.text) if self._filter else event.text)
        if self._filter is not None:  # what it held back
            rest = self._filter.finish()
            if completed:
                yield from self._user_text(rest)
            else:
                self.text_parts.append(rest)
        if completed and self._speak and (rest := self._splitter.flush()):
            yield self._speech(rest)

    def _route(self, event: Text | CallStart | ArgumentsPiece | CallEnd) -> Iterator[StageOutput]:
        req, gen, turn = self._req, self._req.generation, self._turn
        if isinstance(event, Text):
            yield from self._user_text(self._filter.feed(event.text) if self._filter else event.text)
        elif isinstance(event, CallStart):
            if event.name not in self._callable:
                return
            self._open = (new_id("item"), new_id("call"), event.name)
            item_id, call_id, name = self._open
            started = FunctionCallStarted(
                generation=gen, response_id=req.response_id, item_id=item_id, call_id=call_id, name=name, turn=turn
            )
            self._held = [started] if self.calls else None  # a later call may repeat one: held to its end
            if self._held is None:
                yield started
        elif self._open is not None:
            item_id, call_id, name = self._open
            if isinstance(event, ArgumentsPiece):
                delta = FunctionCallArgumentsDelta(
                    generation=gen,
                    response_id=req.response_id,
                    item_id=item_id,
                    call_id=call_id,
                    delta=event.text,
                    turn=turn,
                )
                if self._held is None:
                    yield delta
                else:
                    self._held.append(delta)
                return
            self._open = None
            held, self._held = self._held or [], None
            key = call_key(name, event.arguments)
            if key in self._made:  # the same call again: a small model would go on repeating it
                self.repeated = True
                return
            self._made.add(key)
            self.calls.append(FunctionCallItem(item_id, call_id, name, event.arguments))
            yield from held
            yield FunctionCallDone(
                generation=gen,
                response_id=req.response_id,
                item_id=item_id,
                call_id=call_id,
                name=name,
                arguments=event.arguments,
                turn=turn,
            )

    def _user_text(self, text: str) -> Iterator[StageOutput]:
        if not text:
            return
        self.text_parts.append(text)
        if self._speak:
            yield from (self._speech(sentence) for sentence in self._splitter.feed(text))
        else:
            req = self._req
            if self._timeline is not None:
                self._timeline.mark("lm_first_piece")  # once: the first text out of the response
            yield TextDelta(
                generation=req.generation,
                response_id=req.response_id,
                delta=text,
                turn=self._turn,
                timeline=self._timeline,
            )

    def _speech(self, text: str) -> TextForSpeech:
        """A piece to speak, as the transcript shows it (the TTS stage reads it in words: ``spoken.for_speech``)."""
        req = self._req
        if self._timeline is not None:
            self._timeline.mark("lm_first_piece")  # once: the first words sent to TTS
        return TextForSpeech(
            generation=req.generation,
            response_id=req.response_id,
            text=for_reading(text),
            voice=req.voice,
            output_format=req.output_format,
            speed=req.speed,
            turn=self._turn,
            timeline=self._timeline,
        )
