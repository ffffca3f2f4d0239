"""The interface every stage implements, and the per-session context stages share."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

from pipelines import audio, cpu
from pipelines.config import SessionSettings
from pipelines.messages import (
    AudioOut,
    Downstream,
    Outbound,
    PartialUtterance,
    ResponseFinished,
    ResponseStarted,
    StageOutput,
    TextForSpeech,
    TurnAbandoned,
    TurnConfirmed,
    UserWordsSoFar,
)


class SessionContext:
    """State of the current session that all stages of one unit read.

    ``generation`` changes at every claim and release; stages stamp what they
    produce with the generation of the message they were given, and the unit
    drops anything whose generation is no longer current.
    """

    def __init__(self) -> None:
        self.generation = 0
        self.settings = SessionSettings()
        self._cancelled: dict[str, str] = {}  # response id -> why
        self._abandoned: set[str] = set()
        self._confirmed: set[str] = set()
        self._held: dict[str, list[Outbound]] = {}
        self._cancel_all = False
        self._lock = threading.Lock()
        self.cancel_event = threading.Event()  # set whenever anything is cancelled
        self._responding: dict[str, str] = {}  # responses started and not finished -> their audio format
        self._audio_until = 0.0  # time.monotonic() when the audio sent so far has played, at real-time pace
        self._turn_words: tuple[str, str] = ("", "")  # (speculative turn, its transcript): the latest only
        # A partial transcript is on its way to the STT or being made: the VAD sends no other meanwhile.
        self.partial_pending = threading.Event()
        # The VAD has sent the turn, or a speculation of it, to the STT: the LM stops reading ahead (its
        # answer is on the way); cleared when speech starts or goes on.
        self.turn_ending = threading.Event()

    def is_current(self, generation: int) -> bool:
        return generation == self.generation

    def cancel(self, response_id: str, reason: str) -> None:
        """Cancels a response; ``reason`` is what its ``status_details`` will say (e.g. ``turn_detected``)."""
        with self._lock:
            self._cancelled.setdefault(response_id, reason)
        self.cancel_event.set()

    def cancel_reason(self, response_id: str, generation: int, turn: str = "") -> str | None:
        """Why the response was cancelled, or None while it is not."""
        if generation != self.generation or self._cancel_all:
            return "client_cancelled"  # the session ended
        with self._lock:
            if response_id in self._cancelled:
                return self._cancelled[response_id]
            return "turn_detected" if turn and turn in self._abandoned else None

    def is_cancelled(self, response_id: str, generation: int, turn: str = "") -> bool:
        return self.cancel_reason(response_id, generation, turn) is not None

    # --- speculative turns ---------------------------------------------------
    # Called by the unit under its sink lock, so holding, flushing and dropping
    # keep the order in which stages produced their output.

    def admit(self, out: Outbound) -> list[Outbound]:
        """What of ``out`` (and of output held before it) may go to the session now."""
        ready = self._admit(out)
        for sent in ready:
            self._note_sent(sent)
        return ready

    def _admit(self, out: Outbound) -> list[Outbound]:
        if isinstance(out, TurnConfirmed):
            with self._lock:
                self._confirmed.add(out.turn)
                return self._held.pop(out.turn, [])
        if isinstance(out, TurnAbandoned):
            with self._lock:
                self._abandoned.add(out.turn)
                self._held.pop(out.turn, None)
            self.cancel_event.set()
            return []
        if not out.turn:
            return [out]
        with self._lock:
            if out.turn in self._confirmed:
                return [out]
            if out.turn not in self._abandoned:
                self._held.setdefault(out.turn, []).append(out)
            return []

    def turn_abandoned(self, turn: str) -> bool:
        with self._lock:
            return turn in self._abandoned

    def turn_confirmed(self, turn: str) -> bool:
        with self._lock:
            return turn in self._confirmed

    def note_words(self, turn: str, transcript: str) -> None:
        """What the STT heard in a speculative turn, for the VAD's check of whether the turn is over."""
        with self._lock:
            self._turn_words = (turn, transcript)

    def words_of(self, turn: str) -> str | None:
        """The transcript of speculative ``turn``, or None while the STT has not given it."""
        with self._lock:
            noted, transcript = self._turn_words
            return transcript if turn and noted == turn else None

    # --- is the assistant speaking? -------------------------------------------

    def _note_sent(self, out: Outbound) -> None:
        with self._lock:
            if isinstance(out, ResponseStarted):
                self._responding[out.response_id] = out.output_format
            elif isinstance(out, AudioOut):
                seconds = audio.duration_ms(len(out.data), self._responding.get(out.response_id, audio.PCM)) / 1000
                self._audio_until = max(self._audio_until, time.monotonic()) + seconds
            elif isinstance(out, ResponseFinished):
                self._responding.pop(out.response_id, None)
                if out.status == "cancelled":
                    self._audio_until = 0.0

    def urgency(self, msg: Downstream) -> Callable[[], float]:
        """When the compute work for ``msg`` is due (:func:`pipelines.cpu.serving`; read again while it waits):

        - the way to an answer's first audio (its transcription, its LM up to the first piece, that piece's
          synthesis): at the end of the user's speech, or at the request's arrival for a response that no
          speech of the user started;
        - the rest of an answer: ``NEXT_PIECE_S`` after the end of that speech until its first audio goes out,
          then ``PLAYING_RESERVE_S`` before the audio sent so far runs out;
        - reading ahead of a turn still being spoken: long after it came (``BACKGROUND_S``), and at once when
          the turn ends while the LM's thread, which the answer then waits for, is still at it.
        """
        arrived = time.monotonic()
        if isinstance(msg, PartialUtterance):
            later = arrived + cpu.BACKGROUND_S
            return lambda: later
        if isinstance(msg, UserWordsSoFar):
            later = arrived + cpu.BACKGROUND_S
            return lambda: 0.0 if self.turn_ending.is_set() else later
        timeline = msg.timeline
        start = arrived if timeline is None else timeline.speech_end_at
        # The mark that ends this stage's part of the way to the first audio.
        first_done = "tts_first_audio" if isinstance(msg, TextForSpeech) else "lm_first_piece"

        def due() -> float:
            if timeline is None or timeline.reached("emitted"):
                with self._lock:
                    playing_until = self._audio_until
                if playing_until > start:
                    return max(start, playing_until - cpu.PLAYING_RESERVE_S)
            if timeline is not None and timeline.reached(first_done):
                return start + cpu.NEXT_PIECE_S
            return start

        return due

    def assistant_speaking(self) -> bool:
        """A response is in progress, or the audio sent to the client is still playing there."""
        with self._lock:
            return bool(self._responding) or time.monotonic() < self._audio_until

    def cancel_everything(self) -> None:
        self._cancel_all = True
        self.cancel_event.set()

    def reset(self, generation: int) -> None:
        with self._lock:
            self._cancelled.clear()
            self._abandoned.clear()
            self._confirmed.clear()
            self._held.clear()
            self._responding.clear()
            self._audio_until = 0.0
            self._turn_words = ("", "")
        self.partial_pending.clear()
        self._cancel_all = False
        self.cancel_event.clear()
        self.settings = SessionSettings()
        self.generation = generation


class CancelFlag:
    """Looks like a ``threading.Event`` to an engine; set once the response is cancelled."""

    def __init__(self, context: SessionContext, response_id: str, generation: int, turn: str = "") -> None:
        self._context, self._response_id, self._generation, self._turn = context, response_id, generation, turn

    def is_set(self) -> bool:
        return self._context.is_cancelled(self._response_id, self._generation, self._turn)


class Stage(ABC):
    """One step of a unit, run by its own worker thread.

    ``setup()`` runs once on the stage thread before any message; ``process()``
    yields what the message produced (``Outbound`` messages go to the session,
    ``Downstream`` ones to the next stage) and passes on what it does not handle;
    ``on_session_end()`` forgets the session without stopping the thread;
    ``cleanup()`` runs once when the thread stops.
    """

    name = "stage"

    def __init__(self, context: SessionContext) -> None:
        self.context = context
        # Set by the unit: hands a message to this stage's own thread (its inbox), for work done off it.
        self.later: Callable[[Downstream], None] | None = None
        # Set by the unit: whether a message waits in this stage's inbox (work done meanwhile stops for it).
        self.waiting: Callable[[], bool] = lambda: False

    def setup(self) -> None:
        """Prepares per-unit resources (shared models are already loaded)."""

    @abstractmethod
    def process(self, msg: Downstream) -> Iterable[StageOutput]:
        """Handles one message."""

    def on_session_end(self) -> None:
        """Forgets everything of the session that ended."""

    def cleanup(self) -> None:
        """Releases per-unit resources."""
