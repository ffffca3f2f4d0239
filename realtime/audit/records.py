"""Writes session records off the audio path, on a thread of its own.

The consumer only enqueues; a slow or unavailable database delays the records,
never an audio delta. Writes that fail because the database is unreachable are
retried until they succeed, in order, so nothing is lost while it is down; a
write the database refuses for good (a constraint, a bug) is logged and dropped
so it cannot hold up every record behind it. The backlog is bounded
(``S2S_RECORD_BACKLOG``): past it, while the database stays away, new writes are
dropped and counted rather than held until the process runs out of memory.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import InterfaceError, OperationalError, close_old_connections
from django.db.models import F
from django.utils import timezone

from pipelines import messages as m, timeline
from realtime.audit import recordings
from realtime.models import (
    REQUEST_TO_AUDIO,
    ConversationItem,
    RealtimeSession,
    RefusalCount,
    ResponseRecord,
    Stage,
    SupervisorAction,
    upsert,
)
from realtime.protocol import client_events as ce

if TYPE_CHECKING:
    from realtime.audit.metrics import Metrics
    from realtime.protocol.conversation import Conversation
    from realtime.protocol.responses import ResponseState

logger = logging.getLogger(__name__)

Write = Callable[[], object]  # what it returns (a row count) is not used
RETRYABLE = (OperationalError, InterfaceError)


class RecordWriter:
    def __init__(self, retry_s: float = 1.0, max_backlog: int = 50_000) -> None:
        self._queue: queue.Queue[Write] = queue.Queue(maxsize=max_backlog)
        self._retry_s = retry_s
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.failures = 0
        self.dropped = 0
        self.overflowed = 0

    def submit(self, write: Write) -> None:
        with self._lock:
            self._idle.clear()  # before the put: the writer may finish the write and set it at once
            try:
                self._queue.put_nowait(write)
            except queue.Full:  # full only while writes are waiting, so not idle either way
                self.overflowed += 1
                if self.overflowed == 1 or self.overflowed % 1000 == 0:
                    logger.error(
                        "%d session record writes dropped: %d wait for the database (S2S_RECORD_BACKLOG)",
                        self.overflowed,
                        self._queue.maxsize,
                    )
                return
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="record-writer", daemon=True)
                self._thread.start()

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    def _run(self) -> None:
        while True:
            try:
                write = self._queue.get(timeout=5)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            while True:
                try:
                    close_old_connections()
                    write()
                    break
                except RETRYABLE:
                    self.failures += 1
                    logger.exception("writing a session record failed; retrying in %.1fs", self._retry_s)
                    time.sleep(self._retry_s)
                except Exception:
                    self.dropped += 1
                    logger.exception("a session record was refused by the database; dropped")
                    break
            if self._queue.empty():
                self._idle.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits until every submitted write is done (tests and shutdown)."""
        return self._idle.wait(timeout)


class RefusalTally:
    """Refused connections counted in memory per minute and reason, written at most once a second.

    ``add`` never touches the database; ``flush`` hands what was counted to the
    record writer as one row update per (minute, reason).
    """

    def __init__(self, writer: RecordWriter, node: str, every_s: float = 1.0) -> None:
        self.writer, self.node, self.every_s = writer, node, every_s
        self._counts: dict[tuple[datetime, str, int], int] = {}
        self._seen: set[tuple[datetime, str]] = set()  # (minute, reason) already logged
        self._lock = threading.Lock()
        self._flushed_at = time.monotonic()

    def add(self, reason: str, close_code: int, at: datetime) -> bool:
        """Counts one refusal; True when it is the first of its reason this minute (worth a log line)."""
        minute = at.replace(second=0, microsecond=0)
        with self._lock:
            key = (minute, reason, close_code)
            self._counts[key] = self._counts.get(key, 0) + 1
            first = (minute, reason) not in self._seen
            if first:
                self._seen = {seen for seen in self._seen if seen[0] == minute} | {(minute, reason)}
            due = time.monotonic() - self._flushed_at >= self.every_s
        if due:
            self.flush()
        return first

    def flush(self) -> None:
        with self._lock:
            counts, self._counts = self._counts, {}
            self._flushed_at = time.monotonic()
        if not counts:
            return
        node = self.node

        def write() -> None:
            for (minute, reason, code), count in counts.items():
                RefusalCount.objects.add(minute, node, reason, code, count)

        self.writer.submit(write)


def session_started(writer: RecordWriter, session_id: str, **fields: Any) -> None:
    """Creates the session's row (a refused connection's too, with its end already known)."""
    writer.submit(lambda: upsert(RealtimeSession, {"id": session_id}, fields))


def session_updated(writer: RecordWriter, session_id: str, **fields: Any) -> None:
    """Changes the session's row (its end, a new owner)."""
    writer.submit(lambda: RealtimeSession.objects.filter(id=session_id).update(**fields))


session_ended = session_updated


def item(writer: RecordWriter, session_id: str, item_id: str, **fields: Any) -> None:
    """Writes one item of a session's transcript that no conversation holds (a translation session's phrase)."""
    fields.setdefault("created_at", timezone.now())
    writer.submit(lambda: upsert(ConversationItem, {"session_id": session_id, "item_id": item_id}, fields))


def supervisor_action(
    writer: RecordWriter,
    session_id: str,
    kind: str,
    actor: str,
    started_at: datetime,
    text: str = "",
    ended_at: datetime | None = None,
) -> None:
    """Records what a supervisor began (a listen, a take-over: ended by :func:`supervisor_action_ended`) or did
    (a whisper, a hand-back: ``ended_at`` given)."""
    fields = {"kind": kind, "actor": actor[:200], "text": text, "started_at": started_at, "ended_at": ended_at}
    writer.submit(lambda: SupervisorAction.objects.create(session_id=session_id, **fields))


def supervisor_action_ended(writer: RecordWriter, session_id: str, kind: str, actor: str, started_at: datetime) -> None:
    """The end of a listen or a take-over :func:`supervisor_action` recorded (found by who began it, and when)."""
    ended_at = timezone.now()
    writer.submit(
        lambda: SupervisorAction.objects.filter(
            session_id=session_id, kind=kind, actor=actor[:200], started_at=started_at, ended_at__isnull=True
        ).update(ended_at=ended_at)
    )


def breakdown(marks: dict[str, float], first_audio_at: float | None) -> dict[str, float]:
    """The pipeline's breakdown of a turn (``Timeline.breakdown``), with the moment its first audio was sent."""
    result = dict(marks)
    if "speech_end_at" in result and first_audio_at is not None and first_audio_at >= result["speech_end_at"]:
        result[timeline.SENT] = first_audio_at - result["speech_end_at"]
    return result


def principal_of(scope: Mapping[str, Any]) -> str:
    """Who opened a session: the API key or client secret the auth layer put in the scope, else the Django user."""
    principal = scope.get("s2s_principal")
    if principal:
        return str(principal)[:200]
    user = scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.get_username()}"[:200]
    return ""


class SessionRecorder:
    """Turns one session's conversation into item and response records, and feeds the latency metrics.

    Called on the event loop after the conversation has handled a client event
    or a pipeline message; it only reads what the conversation already tracks
    and enqueues writes.
    """

    def __init__(self, session_id: str, writer: RecordWriter, metrics: Metrics) -> None:
        self.session_id = session_id
        self.writer = writer
        self.metrics = metrics
        self._seq = 0
        self._speech_end: float | None = None  # monotonic time the user's last turn ended
        self._stt_s: float | None = None
        self._committed_ms: dict[str, int] = {}
        self.audio = recordings.for_session(session_id, writer.submit)  # None unless S2S_RECORD_AUDIO

    def client_event(self, event: ce.ClientEvent, conversation: Conversation) -> None:
        """Records what an accepted client event changed: an item added, or a spoken answer truncated."""
        try:
            if self.audio is not None:
                self.audio.client_event(event, conversation)
            if isinstance(event, ce.ItemCreate):
                self._client_item(event, conversation)
            elif isinstance(event, ce.ItemTruncate):
                self._truncated(event.item_id, event.audio_end_ms, conversation)
        except Exception:
            logger.exception("session %s: could not record a client item", self.session_id)

    def _truncated(self, item_id: str, audio_ms: int, conversation: Conversation) -> None:
        """The history keeps what the user heard; so does the record."""
        item = conversation.items.get(item_id) or {}
        heard = next(
            (p.get("transcript") or "" for p in item.get("content", []) if p.get("type") == "output_audio"), ""
        )
        session_id = self.session_id

        def write() -> None:
            ConversationItem.objects.filter(session_id=session_id, item_id=item_id).update(
                text=heard, audio_ms=audio_ms
            )

        self.writer.submit(write)

    def _client_item(self, event: ce.ItemCreate, conversation: Conversation) -> None:
        key = event.item.id or conversation.items.last_id()
        item = conversation.items.get(key) if key else None
        if item is None or item.get("type") != "message":
            return
        text = " ".join(p.get("text") or "" for p in item.get("content", []) if p.get("text"))
        self._item(item["id"], item.get("role", "user"), text, None)

    def output(self, msg: m.Outbound, conversation: Conversation) -> None:
        """Never raises: a recording problem must not cost the client an event."""
        try:
            if self.audio is not None:
                self.audio.output(msg, conversation)
            self._output(msg, conversation)
        except Exception:
            logger.exception("session %s: could not record %s", self.session_id, type(msg).__name__)

    def _output(self, msg: m.Outbound, conversation: Conversation) -> None:
        if isinstance(msg, m.SpeechStopped):
            self._speech_end = msg.speech_end_at or time.monotonic()
        elif isinstance(msg, m.AudioCommitted):
            self._committed_ms[msg.item_id] = msg.duration_ms
            if self._speech_end is None:
                self._speech_end = time.monotonic()  # a manual commit ends the turn
        elif isinstance(msg, m.TranscriptCompleted):
            self._stt_s = msg.stt_s
            if msg.stt_s is not None:
                self.metrics.observe(Stage.STT, msg.stt_s)
            self._item(msg.item_id, "user", msg.transcript, self._committed_ms.pop(msg.item_id, None))
        elif isinstance(msg, m.ResponseFinished):
            state = conversation.responses.find(msg.response_id)
            if state is not None:
                self._response(msg, state)

    def _response(self, msg: m.ResponseFinished, state: ResponseState) -> None:
        voice_to_voice = None
        if (
            self._speech_end is not None
            and state.first_audio_at is not None
            and state.first_audio_at >= self._speech_end
        ):
            voice_to_voice = state.first_audio_at - self._speech_end
        turn = breakdown(msg.breakdown if msg.timeline is None else msg.timeline.breakdown(), state.first_audio_at)
        if self._speech_end is None and state.first_audio_at is not None and state.first_audio_at >= state.started_at:
            # A typed turn has no end of speech: it is timed from its response.create to the first audio instead.
            turn[REQUEST_TO_AUDIO] = state.first_audio_at - state.started_at
        lat = msg.latencies
        fields: dict[str, Any] = {
            "item_id": state.item_id,
            "status": msg.status,
            "reason": (msg.reason or "")[:200],
            "input_tokens": msg.input_tokens,
            "output_tokens": msg.output_tokens,
            "audio_ms": state.audio_ms,
            "stt_s": self._stt_s if self._speech_end is not None else None,
            "lm_first_token_s": lat.get("lm_first_token_s"),
            "tts_first_audio_s": lat.get("tts_first_audio_s"),
            "voice_to_voice_s": voice_to_voice,
            # read now, not when the TTS finished: a speculative answer can be done before the decision
            "breakdown": turn,
            "finished_at": timezone.now(),
        }
        for stage in Stage:  # STT was observed when its transcript came
            if stage is not Stage.STT and fields[stage.field] is not None:
                self.metrics.observe(stage, fields[stage.field])
        self.metrics.count_response(msg.status)
        self._speech_end, self._stt_s = None, None
        if not state.out_of_band:
            self._item(state.item_id, "assistant", state.text, state.audio_ms)
        session_id, audio_s = self.session_id, state.audio_ms / 1000

        def write() -> None:
            upsert(ResponseRecord, {"session_id": session_id, "response_id": msg.response_id}, fields)
            RealtimeSession.objects.filter(id=session_id).update(audio_out_seconds=F("audio_out_seconds") + audio_s)

        self.writer.submit(write)

    def item(self, item_id: str, role: str, text: str, audio_ms: int | None) -> None:
        """Records an item the pipeline did not make (a supervisor's words, spoken during a take-over)."""
        self._item(item_id, role, text, audio_ms)

    def _item(self, item_id: str, role: str, text: str, audio_ms: int | None) -> None:
        self._seq += 1
        session_id = self.session_id
        fields = {"seq": self._seq, "role": role, "text": text, "audio_ms": audio_ms, "created_at": timezone.now()}

        def write() -> None:
            upsert(ConversationItem, {"session_id": session_id, "item_id": item_id}, fields)

        self.writer.submit(write)
