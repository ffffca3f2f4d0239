"""Translation sessions (``/v1/realtime/translations``) on the wire, pure: the client's three events parsed and
checked, the session's settings and how the client reads them, the server's events.

The shapes are the openai SDK's ``types/realtime/realtime_translation_*``: ``session.update`` changes
``audio.output.language``, ``audio.input.transcription`` and ``audio.input.noise_reduction`` (the type and the
model are fixed when the session opens), ``session.input_audio_buffer.append`` carries 24 kHz PCM16,
``session.close`` ends it once what was heard has been translated. There is no ``response.create``: it streams.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from realtime.protocol.events import server_event
from realtime.protocol.wire import EventError, check_type, decode_audio, encode_audio, loads, optional, require

DEFAULT_MODEL = "gpt-realtime-translate"
KIND = "translation"  # the session's type, fixed
NOISE_REDUCTION_TYPES = ("near_field", "far_field")
APPEND = "session.input_audio_buffer.append"
UPDATE = "session.update"
CLOSE = "session.close"
CLIENT_EVENTS = (UPDATE, APPEND, CLOSE)


@dataclass(frozen=True)
class TranslationEvent:
    """One client event of a translation session: its type, its id, the audio of an append, the settings of an
    update (checked already)."""

    type: str
    event_id: str | None = None
    audio: bytes = b""
    session: dict[str, Any] = field(default_factory=dict)


def parse(text: str | bytes | None, max_bytes: int) -> TranslationEvent:
    """A client frame as a :class:`TranslationEvent`; raises :class:`EventError` (its ``event_id`` set when the
    frame got that far) for anything else."""
    if text is None:
        raise EventError("invalid_event", "Binary frames are not events: send JSON text.")
    if len(text) > max_bytes:
        raise EventError("event_too_large", f"The event is larger than the limit of {max_bytes} bytes.")
    obj = loads(text)
    if not isinstance(obj, dict):
        raise EventError("invalid_event", "An event must be a JSON object.")
    event_id = obj.get("event_id") if isinstance(obj.get("event_id"), str) else None
    try:
        kind = require(obj, "type", str)
        if kind == APPEND:
            return TranslationEvent(kind, event_id, audio=decode_audio(obj.get("audio"), "audio", max_bytes))
        if kind == UPDATE:
            return TranslationEvent(kind, event_id, session=require(obj, "session", dict))
        if kind == CLOSE:
            return TranslationEvent(kind, event_id)
        raise EventError(
            "invalid_event",
            f"Unsupported event type {kind!r} in a translation session: it takes {', '.join(CLIENT_EVENTS)}.",
            "type",
        )
    except EventError as exc:
        exc.event_id = event_id
        raise


@dataclass
class TranslationSettings:
    """A translation session's settings, as ``session.created`` and ``session.updated`` show them."""

    id: str
    model: str
    targets: tuple[str, ...]  # the output languages this server can speak
    expires_at: int
    language: str = "en"
    transcription: dict[str, Any] | None = None  # {"model": ...}: source transcript deltas
    noise_reduction: dict[str, Any] | None = None  # {"type": ..., "strength": ...}

    def update(self, session: dict[str, Any]) -> None:
        """Applies a ``session.update``'s ``session``, all or nothing; raises :class:`EventError` naming the
        ``param`` at fault."""
        if "type" in session and session["type"] != KIND:
            raise EventError(
                "invalid_value", "'session.type' of a translation session is 'translation'.", "session.type"
            )
        if "model" in session and session["model"] != self.model:
            raise EventError(
                "invalid_value",
                "'session.model' is set when a translation session opens and cannot be changed.",
                "session.model",
            )
        unknown = set(session) - {"audio", "type", "model"}
        if unknown:
            name = sorted(unknown)[0]
            raise EventError("unknown_parameter", f"Unknown parameter: 'session.{name}'.", f"session.{name}")
        audio = optional(session, "audio", dict, "session.audio", {})
        inputs = optional(audio, "input", dict, "session.audio.input", {})
        output = optional(audio, "output", dict, "session.audio.output", {})
        language = self.language
        if "language" in output:
            language = self._language(output["language"])
        transcription = self.transcription
        if "transcription" in inputs:
            transcription = _transcription(inputs["transcription"])
        noise = self.noise_reduction
        if "noise_reduction" in inputs:
            noise = _noise_reduction(inputs["noise_reduction"], self.noise_reduction)
        self.language, self.transcription, self.noise_reduction = language, transcription, noise

    def _language(self, value: Any) -> str:
        param = "session.audio.output.language"
        language = check_type(value, str, param).strip().lower()
        if language.split("-")[0] not in self.targets:
            raise EventError(
                "unsupported_language",
                f"This server cannot translate into {value!r}: the output languages available are "
                f"{', '.join(self.targets)}.",
                param,
            )
        return language

    @property
    def noise_reduction_type(self) -> str | None:
        return self.noise_reduction["type"] if self.noise_reduction else None

    def as_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": KIND,
            "model": self.model,
            "expires_at": self.expires_at,
            "audio": {
                "input": {"transcription": self.transcription, "noise_reduction": self.noise_reduction},
                "output": {"language": self.language},
            },
        }


def _transcription(value: Any) -> dict[str, Any] | None:
    param = "session.audio.input.transcription"
    if value is None:
        return None
    check_type(value, dict, param)
    model = require(value, "model", str, f"{param}.model")
    return {"model": model}


def _noise_reduction(value: Any, current: dict[str, Any] | None) -> dict[str, Any] | None:
    param = "session.audio.input.noise_reduction"
    if value is None:
        return None
    check_type(value, dict, param)
    kind = require(value, "type", str, f"{param}.type")
    if kind not in NOISE_REDUCTION_TYPES:
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}.type': {kind!r}; expected one of {', '.join(NOISE_REDUCTION_TYPES)}.",
            f"{param}.type",
        )
    strength = optional(value, "strength", (int, float), f"{param}.strength")
    if strength is None:
        strength = current["strength"] if current else 1.0
    if not 0 <= strength <= 1:
        raise EventError("invalid_value", f"'{param}.strength' must be between 0 and 1.", f"{param}.strength")
    return {"type": kind, "strength": float(strength)}


def new_settings(
    session_id: str, model: str | None, targets: tuple[str, ...], max_session_s: float
) -> TranslationSettings:
    """A new session's settings: the model it asked for (fixed from now on), the first language available."""
    expires = int(time.time() + max_session_s)
    return TranslationSettings(session_id, model or DEFAULT_MODEL, targets, expires, language=targets[0])


def no_audio(idle_s: float) -> EventError:
    """Why a translation session that heard no audio for ``idle_s`` seconds was closed."""
    return EventError(
        "session_idle_timeout",
        f"No audio for {idle_s:g} seconds: the translation session was closed.",
        error_type="invalid_request_error",
    )


# --- the server's events ------------------------------------------------------------------


def created(settings: TranslationSettings) -> dict[str, Any]:
    return server_event("session.created", session=settings.as_wire())


def updated(settings: TranslationSettings) -> dict[str, Any]:
    return server_event("session.updated", session=settings.as_wire())


def closed() -> dict[str, Any]:
    return server_event("session.closed")


def input_transcript(delta: str, elapsed_ms: int) -> dict[str, Any]:
    return server_event("session.input_transcript.delta", delta=delta, elapsed_ms=elapsed_ms)


def output_transcript(delta: str, elapsed_ms: int) -> dict[str, Any]:
    return server_event("session.output_transcript.delta", delta=delta, elapsed_ms=elapsed_ms)


def output_audio(pcm16: bytes, elapsed_ms: int) -> dict[str, Any]:
    return server_event(
        "session.output_audio.delta",
        delta=encode_audio(pcm16),
        elapsed_ms=elapsed_ms,
        format="pcm16",
        sample_rate=24000,
        channels=1,
    )
