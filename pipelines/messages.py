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


@dataclass(frozen=True)
class Message:
    generation: int
    # The speculative turn this belongs to ("" when it is not speculative): output of a
    # speculative turn is held until the turn is confirmed, and dropped if it is abandoned.
    turn: str = field(default="", kw_only=True)


@dataclass(frozen=True)
class Downstream(Message):
    """A message for the next stage."""


@dataclass(frozen=True)
class Outbound(Message):
    """A message for the session's consumer."""


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
    """Manual commit of the input buffer (``input_audio_buffer.commit``)."""

    item_id: str
    create_response: bool = False
    response: ResponseRequest | None = None


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
    out_of_band: bool = False
    item_id: str = ""
    # Extra items given with an out-of-band response (``input`` of response.create).
    extra_input: tuple[HistoryItem, ...] = ()


@dataclass(frozen=True)
class HistoryItem:
    item_id: str
    role: str  # "user" | "assistant" | "system"
    text: str


@dataclass(frozen=True)
class AddItem(Downstream):
    """Adds an item to the conversation held by the LM stage."""

    item: HistoryItem
    previous_item_id: str | None = None


@dataclass(frozen=True)
class DeleteItem(Downstream):
    item_id: str


@dataclass(frozen=True)
class TruncateItem(Downstream):
    """Keeps only the first ``fraction`` of an assistant item's text (what was heard)."""

    item_id: str
    text: str


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


@dataclass(frozen=True)
class ResponseEnd(Downstream):
    """The LM finished (or stopped) a response; TTS closes it after its audio."""

    response_id: str
    status: str  # completed | cancelled | failed | incomplete
    input_tokens: int = 0
    output_tokens: int = 0
    reason: str | None = None
    lm_first_token_s: float | None = None


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


@dataclass(frozen=True)
class AudioCleared(Outbound):
    pass


@dataclass(frozen=True)
class TranscriptDelta(Outbound):
    item_id: str
    delta: str


@dataclass(frozen=True)
class TranscriptCompleted(Outbound):
    item_id: str
    transcript: str
    stt_s: float | None = None


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
class AudioOut(Outbound):
    """Response audio in the session's output format, with the text it speaks."""

    response_id: str
    data: bytes
    transcript: str = ""
    first: bool = False


@dataclass(frozen=True)
class ResponseFinished(Outbound):
    response_id: str
    status: str
    input_tokens: int = 0
    output_tokens: int = 0
    reason: str | None = None
    latencies: dict[str, float] = field(default_factory=dict)


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
