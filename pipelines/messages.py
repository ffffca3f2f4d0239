"""Typed messages passed between the consumer, the stage threads and back.

Every message carries the ``generation`` of the session it belongs to: a unit
bumps its generation at each claim, and anything stamped with an older one is
dropped, by the stage threads on input and by the unit before it reaches a
session's sink. That is what keeps one session's output out of the next.

Two families:

* :class:`Downstream` messages travel from one stage to the next (or from the
  consumer into the head stage).
* :class:`Outbound` messages leave the pipeline for the consumer, which turns
  them into Realtime server events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipelines.config import FunctionTool, SessionSettings, ToolChoice, Truncation
from pipelines.ids import new_id
from pipelines.timeline import Timeline


@dataclass(frozen=True)
class Message:
    generation: int
    # The speculative turn this belongs to ("" when it is not speculative): output of a
    # speculative turn is held until the turn is confirmed, and dropped if it is abandoned.
    turn: str = field(default="", kw_only=True)
    # The user turn whose way to the reply this message is part of (pipelines/timeline.py), if any.
    timeline: Timeline | None = field(default=None, kw_only=True, compare=False, repr=False)


@dataclass(frozen=True)
class Downstream(Message):
    """A message for the next stage."""


@dataclass(frozen=True)
class Outbound(Message):
    """A message for the session's consumer."""


StageOutput = Downstream | Outbound  # what a stage yields: a message for the next stage, or for the consumer


# --- control ---------------------------------------------------------------


@dataclass(frozen=True)
class SessionEnd(Downstream):
    """Passed through every stage on release; each resets and acknowledges it."""


@dataclass(frozen=True)
class Shutdown(Downstream):
    """Stops a stage thread for good."""


# --- into the pipeline -----------------------------------------------------


@dataclass(frozen=True)
class AudioIn(Downstream):
    """A chunk of the user's audio, still in the session's input format."""

    data: bytes
    audio_format: str


@dataclass(frozen=True)
class CommitAudio(Downstream):
    """Manual commit of the input buffer (``input_audio_buffer.commit``); ``response`` answers it at once."""

    item_id: str
    response: ResponseRequest | None = None
    event_id: str | None = None  # the client's commit event, for an error about it


@dataclass(frozen=True)
class AudioItem(Downstream):
    """Audio given inside a ``conversation.item.create``: transcribed, no response."""

    item_id: str
    data: bytes
    audio_format: str


@dataclass(frozen=True)
class ClearAudio(Downstream):
    """Drops the input buffer (``input_audio_buffer.clear``)."""


@dataclass(frozen=True)
class ResponseRequest(Downstream):
    """Asks the LM for a response. Per-response overrides are already resolved."""

    response_id: str
    instructions: str
    output_modalities: tuple[str, ...]
    max_output_tokens: int | None
    voice: str
    output_format: str
    temperature: float
    speed: float = 1.0  # speaking rate, 0.25-1.5 (audio.output.speed)
    out_of_band: bool = False
    item_id: str = ""
    # The items an explicit ``input`` of response.create gives as the whole context (None: the conversation).
    extra_input: tuple[HistoryEntry, ...] | None = None
    # Functions the model may call, and whether it must (see pipelines/tools.py to build them).
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    parallel_tool_calls: bool = True  # several calls in one response
    # Names among ``tools`` the server runs itself (MCP): a call of one pauses the response (``ToolsPending``).
    hosted: frozenset[str] = frozenset()
    # Starts paused, before any generation: calls approved earlier run first, then the model answers.
    awaiting: bool = False
    truncation: Truncation = Truncation()

    @classmethod
    def from_settings(cls, settings: SessionSettings, generation: int, **overrides: Any) -> ResponseRequest:
        """The one way to make a request: the session's settings, with the response's own overrides."""
        fields: dict[str, Any] = {
            "response_id": new_id("resp"),
            "instructions": settings.instructions,
            "output_modalities": settings.output_modalities,
            "max_output_tokens": settings.max_output_tokens,
            "voice": settings.voice,
            "output_format": settings.output_format,
            "temperature": settings.temperature,
            "speed": settings.speed,
            "tools": settings.tools,
            "tool_choice": settings.tool_choice,
            "hosted": settings.hosted,
            "parallel_tool_calls": settings.parallel_tool_calls,
            "truncation": settings.truncation,
        }
        return cls(generation=generation, **{**fields, **overrides})


@dataclass(frozen=True)
class HistoryItem:
    item_id: str
    role: str  # "user" | "assistant" | "system"
    text: str


ROOT = "root"  # the ``previous_item_id`` that puts an item first


def insert_after(items: dict[str, Any], key: str, value: Any, previous: str | None) -> dict[str, Any]:
    """``items`` (in conversation order) with ``value`` placed right after ``previous``.

    ``ROOT`` puts it first; ``None`` or an id not in ``items`` puts it last. The
    conversation's items and the LM's history both place items with this, so they agree.
    """
    if previous is None or (previous != ROOT and previous not in items):
        return {**items, key: value}
    if previous == ROOT:
        return {key: value, **items}
    entries = list(items.items())
    at = [k for k, _ in entries].index(previous) + 1
    entries.insert(at, (key, value))
    return dict(entries)


@dataclass(frozen=True)
class FunctionCallItem:
    """A call the assistant made (or a client created): ``arguments`` is JSON text.

    ``output``: the result, for a call the server ran itself (an MCP call is one item holding both).
    """

    item_id: str
    call_id: str
    name: str
    arguments: str
    output: str | None = None


@dataclass(frozen=True)
class FunctionCallOutputItem:
    """The result of a call, given by the client; the model sees it as a tool message."""

    item_id: str
    call_id: str
    output: str


HistoryEntry = HistoryItem | FunctionCallItem | FunctionCallOutputItem


@dataclass(frozen=True)
class AddItem(Downstream):
    """Adds an item to the conversation held by the LM stage."""

    item: HistoryEntry
    previous_item_id: str | None = None


@dataclass(frozen=True)
class DeleteItem(Downstream):
    item_id: str


@dataclass(frozen=True)
class TruncateItem(Downstream):
    """Keeps only the first ``fraction`` of an assistant item's text (what was heard)."""

    item_id: str
    text: str


@dataclass(frozen=True)
class ResponseResume(Downstream):
    """The results of the calls a paused response waits for (see ``ToolsPending``).

    The LM keeps ``results`` in the conversation (a call with its ``output`` replaces the call), then
    goes on generating the same response; with ``finish`` (an approval is needed first, the response
    was cancelled) it ends the response instead.
    """

    response_id: str
    results: tuple[HistoryEntry, ...] = ()
    finish: bool = False


# --- between stages --------------------------------------------------------


@dataclass(frozen=True)
class Utterance(Downstream):
    """A finished user turn of audio (16 kHz float32 samples as bytes) for STT."""

    item_id: str
    samples: bytes
    create_response: bool
    response: ResponseRequest | None = None


@dataclass(frozen=True)
class PartialUtterance(Downstream):
    """Audio so far of a turn still being spoken, for partial transcripts."""

    item_id: str
    samples: bytes


@dataclass(frozen=True)
class PartialHeard(Downstream):
    """A partial transcript made off the STT stage's thread, handed back to it (``Stage.later``)."""

    item_id: str
    text: str


@dataclass(frozen=True)
class UserWordsSoFar(Downstream):
    """The words of a turn still being spoken (a partial transcript), for the LM to read ahead: the prompt
    its answer will have, evaluated into the conversation's cache before the turn ends."""

    item_id: str
    text: str


@dataclass(frozen=True)
class ReadAhead(Downstream):
    """The next answer's prompt changed outside a turn (the session's instructions or tools): the LM may read
    it into the conversation's cache now, while nothing else waits, rather than when the next turn ends."""


@dataclass(frozen=True)
class UserTurn(Downstream):
    """The transcript of a user turn, for the LM."""

    item_id: str
    text: str
    create_response: bool
    response: ResponseRequest | None = None


@dataclass(frozen=True)
class TextForSpeech(Downstream):
    """A sentence or clause of the response to speak."""

    response_id: str
    text: str
    voice: str
    output_format: str
    speed: float = 1.0


@dataclass(frozen=True)
class ResponseEnd(Downstream):
    """The LM finished (or stopped) a response; TTS closes it after its audio."""

    response_id: str
    status: str  # completed | cancelled | failed | incomplete
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reason: str | None = None
    lm_first_token_s: float | None = None
    error_code: str | None = None  # failed: why, as the API names it (``context_length_exceeded``)


# --- out of the pipeline ---------------------------------------------------


@dataclass(frozen=True)
class SpeechStarted(Outbound):
    item_id: str
    audio_start_ms: int


@dataclass(frozen=True)
class SpeechStopped(Outbound):
    item_id: str
    audio_end_ms: int
    # time.monotonic() when the last speech frame arrived: where voice-to-voice latency starts
    speech_end_at: float = 0.0


@dataclass(frozen=True)
class AudioCommitted(Outbound):
    item_id: str
    duration_ms: int
    samples: bytes = b""  # the committed audio, 16 kHz float32 (``conversation.item.retrieve`` returns it)


@dataclass(frozen=True)
class AudioCleared(Outbound):
    pass


# (word, natural-log probability) pairs of a transcript, when the session asked for them
WordLogprobs = tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class TranscriptDelta(Outbound):
    item_id: str
    delta: str
    logprobs: WordLogprobs | None = None


@dataclass(frozen=True)
class TranscriptCompleted(Outbound):
    item_id: str
    transcript: str
    stt_s: float | None = None
    logprobs: WordLogprobs | None = None


@dataclass(frozen=True)
class TranscriptFailed(Outbound):
    item_id: str
    message: str


@dataclass(frozen=True)
class ResponseStarted(Outbound):
    response_id: str
    item_id: str
    output_modalities: tuple[str, ...]
    output_format: str
    voice: str
    out_of_band: bool


@dataclass(frozen=True)
class TextDelta(Outbound):
    """Response text, for text-only responses (spoken ones send AudioOut)."""

    response_id: str
    delta: str


@dataclass(frozen=True)
class SpokenText(Outbound):
    """The text of a piece of a spoken response, sent when its synthesis starts: the words reach the client
    ahead of their audio (the ``AudioOut`` that starts the piece names it again, for where it starts)."""

    response_id: str
    text: str


@dataclass(frozen=True)
class AudioOut(Outbound):
    """Response audio in the session's output format; ``transcript``: the piece (sent before as
    ``SpokenText``) that this audio starts, empty while the same piece goes on."""

    response_id: str
    data: bytes
    transcript: str = ""


@dataclass(frozen=True)
class FunctionCallStarted(Outbound):
    """The model began a call of ``name``: a ``function_call`` output item, in progress."""

    response_id: str
    item_id: str
    call_id: str
    name: str


@dataclass(frozen=True)
class FunctionCallArgumentsDelta(Outbound):
    """The next piece of a call's arguments (JSON text)."""

    response_id: str
    item_id: str
    call_id: str
    delta: str


@dataclass(frozen=True)
class FunctionCallDone(Outbound):
    """A finished call; ``arguments`` is JSON that matches the function's schema.

    A call that was cancelled or cut by the token limit gets no ``FunctionCallDone``.
    """

    response_id: str
    item_id: str
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolsPending(Outbound):
    """The LM paused a response after calls of tools the server runs (``hosted``); ``ResponseResume`` goes on.

    ``calls`` is empty for a response that starts paused (``ResponseRequest.awaiting``).
    """

    response_id: str
    calls: tuple[FunctionCallItem, ...] = ()


@dataclass(frozen=True)
class ResponseFinished(Outbound):
    response_id: str
    status: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reason: str | None = None
    latencies: dict[str, float] = field(default_factory=dict)
    error_code: str | None = None  # failed: why, as the API names it (None: a server error)
    # The turn's Timeline.breakdown() when the TTS finished it; a speculative response can finish before the turn
    # ends, so the session reads its ``timeline`` again once the response goes out (the decision, the release).
    breakdown: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnConfirmed(Outbound):
    """The silence window closed: the speculative turn's held output may go out."""


@dataclass(frozen=True)
class TurnAbandoned(Outbound):
    """The user spoke again: the speculative turn's output is dropped and its work cancelled."""


@dataclass(frozen=True)
class UnitFailed(Outbound):
    """A stage thread died: the session cannot go on, and the unit must be rebuilt."""

    stage: str
    message: str


@dataclass(frozen=True)
class PipelineError(Outbound):
    """A problem to report to the client as an ``error`` event."""

    code: str
    message: str
    stage: str = ""
    response_id: str | None = None
    event_id: str | None = None  # the client event it answers, when one caused it
