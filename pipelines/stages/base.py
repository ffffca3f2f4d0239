"""The interface every stage implements, and the per-session context stages share."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable

from pipelines.config import SessionSettings
from pipelines.messages import Downstream, Message, Outbound, TurnAbandoned, TurnConfirmed


class SessionContext:
    """State of the current session that all stages of one unit read.

    ``generation`` changes at every claim and release; stages stamp what they
    produce with the generation of the message they were given, and the unit
    drops anything whose generation is no longer current.
    """

    def __init__(self) -> None:
        self.generation = 0
        self.settings = SessionSettings()
        self._cancelled: set[str] = set()
        self._abandoned: set[str] = set()
        self._confirmed: set[str] = set()
        self._held: dict[str, list[Outbound]] = {}
        self._cancel_all = False
        self._lock = threading.Lock()
        self.cancel_event = threading.Event()  # set whenever anything is cancelled

    def is_current(self, generation: int) -> bool:
        return generation == self.generation

    def cancel(self, response_id: str) -> None:
        with self._lock:
            self._cancelled.add(response_id)
        self.cancel_event.set()

    def is_cancelled(self, response_id: str, generation: int, turn: str = "") -> bool:
        if generation != self.generation or self._cancel_all:
            return True
        with self._lock:
            return response_id in self._cancelled or (bool(turn) and turn in self._abandoned)

    # --- speculative turns ---------------------------------------------------
    # Called by the unit under its sink lock, so holding, flushing and dropping
    # keep the order in which stages produced their output.

    def admit(self, out: Outbound) -> list[Outbound]:
        """What of ``out`` (and of output held before it) may go to the session now."""
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

    def cancel_everything(self) -> None:
        self._cancel_all = True
        self.cancel_event.set()

    def reset(self, generation: int) -> None:
        with self._lock:
            self._cancelled.clear()
            self._abandoned.clear()
            self._confirmed.clear()
            self._held.clear()
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

    def setup(self) -> None:
        """Prepares per-unit resources (shared models are already loaded)."""

    @abstractmethod
    def process(self, msg: Downstream) -> Iterable[Message]:
        """Handles one message."""

    def on_session_end(self) -> None:
        """Forgets everything of the session that ended."""

    def cleanup(self) -> None:
        """Releases per-unit resources."""
