"""The Realtime session object: merging ``session.update`` (GA nested or beta flat shape) and echoing it."""

from __future__ import annotations

import copy
import time
from typing import Any

from pipelines import audio
from pipelines.config import SessionSettings, TurnDetection
from realtime.events import EventError, check_type

BETA_FORMATS = {"pcm16": audio.PCM, "g711_ulaw": audio.PCMU, "g711_alaw": audio.PCMA}
GA_TO_BETA_FORMATS = {v: k for k, v in BETA_FORMATS.items()}
SEMANTIC_EAGERNESS_MS = {"low": 1200, "medium": 700, "auto": 700, "high": 350}
# Fields the server accepts and echoes without acting on them.
PASSTHROUGH = ("tracing", "prompt", "include", "truncation", "tools", "tool_choice", "speed", "client_secret")


def _format_object(fmt: str) -> dict[str, Any]:
    return {"type": fmt, "rate": audio.RATES[fmt]} if fmt == audio.PCM else {"type": fmt}


class SessionConfig:
    """The session as the client sees it. ``settings()`` gives what the pipeline needs."""

    def __init__(self, session_id: str, model: str, voices: tuple[str, ...]) -> None:
        self.id = session_id
        self.model = model
        self.voices = voices
        self.created = int(time.time())
        self.instructions = ("You are a helpful voice assistant. Answer briefly, in one or two short sentences, "
                             "in plain spoken English without lists or markup.")
        self.output_modalities: list[str] = ["audio"]
        self.input_format = audio.PCM
        self.output_format = audio.PCM
        self.voice = voices[0] if voices else "alloy"
        self.transcription: dict[str, Any] | None = {"model": "whisper-1"}
        self.noise_reduction: dict[str, Any] | None = None
        self.turn_detection: dict[str, Any] | None = {
            "type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
            "create_response": True, "interrupt_response": True, "idle_timeout_ms": None,
        }
        self.max_output_tokens: int | str = "inf"
        self.temperature = 0.8
        self.extra: dict[str, Any] = {"tracing": None, "prompt": None, "include": None, "truncation": "auto",
                                      "tools": [], "tool_choice": "auto"}

    # --- updates ----------------------------------------------------------

    def update(self, session: Any, beta: bool) -> None:
        """Applies a ``session.update``. Validates everything before changing anything."""
        check_type(session, dict, "session")
        trial = copy.copy(self)
        trial.extra = dict(self.extra)
        if "audio" in session or not beta and "type" in session:
            trial._update_ga(session)
        else:
            trial._update_beta(session)
        self.__dict__.update(trial.__dict__)

    def _update_common(self, s: dict[str, Any]) -> None:
        if "instructions" in s:
            self.instructions = check_type(s["instructions"], str, "session.instructions")
        if "model" in s and s["model"] is not None:
            self.model = check_type(s["model"], str, "session.model")
        if "temperature" in s and s["temperature"] is not None:
            value = check_type(s["temperature"], (int, float), "session.temperature")
            if not 0.0 <= value <= 2.0:
                raise EventError("invalid_value", "'session.temperature' must be between 0 and 2.", "session.temperature")
            self.temperature = float(value)
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if key in s and s[key] is not None:
                self.max_output_tokens = parse_max_tokens(s[key], f"session.{key}")
        for key in PASSTHROUGH:
            if key in s:
                self.extra[key] = s[key]

    def _update_ga(self, s: dict[str, Any]) -> None:
        if "type" in s and s["type"] not in ("realtime", "transcription"):
            raise EventError("invalid_value", "Invalid value for 'session.type': expected 'realtime'.", "session.type")
        self._update_common(s)
        if "output_modalities" in s and s["output_modalities"] is not None:
            self.output_modalities = parse_modalities(s["output_modalities"], "session.output_modalities")
        audio_cfg = check_type(s.get("audio") or {}, dict, "session.audio")
        inp = check_type(audio_cfg.get("input") or {}, dict, "session.audio.input")
        out = check_type(audio_cfg.get("output") or {}, dict, "session.audio.output")
        if "format" in inp:
            self.input_format = parse_ga_format(inp["format"], "session.audio.input.format")
        if "transcription" in inp:
            self.transcription = check_type(inp["transcription"], (dict, type(None)), "session.audio.input.transcription")
        if "noise_reduction" in inp:
            self.noise_reduction = check_type(inp["noise_reduction"], (dict, type(None)), "session.audio.input.noise_reduction")
        if "turn_detection" in inp:
            self.turn_detection = parse_turn_detection(inp["turn_detection"], "session.audio.input.turn_detection", self.turn_detection)
        if "format" in out:
            self.output_format = parse_ga_format(out["format"], "session.audio.output.format")
        if "voice" in out:
            self.voice = self.parse_voice(out["voice"], "session.audio.output.voice")
        if "speed" in out:
            self.extra["speed"] = out["speed"]

    def _update_beta(self, s: dict[str, Any]) -> None:
        self._update_common(s)
        if "modalities" in s and s["modalities"] is not None:
            modalities = parse_modalities(s["modalities"], "session.modalities", allow_both=True)
            self.output_modalities = ["audio"] if "audio" in modalities else ["text"]
        if "output_modalities" in s and s["output_modalities"] is not None:
            self.output_modalities = parse_modalities(s["output_modalities"], "session.output_modalities")
        if "input_audio_format" in s:
            self.input_format = parse_beta_format(s["input_audio_format"], "session.input_audio_format")
        if "output_audio_format" in s:
            self.output_format = parse_beta_format(s["output_audio_format"], "session.output_audio_format")
        if "voice" in s:
            self.voice = self.parse_voice(s["voice"], "session.voice")
        if "input_audio_transcription" in s:
            self.transcription = check_type(s["input_audio_transcription"], (dict, type(None)), "session.input_audio_transcription")
        if "input_audio_noise_reduction" in s:
            self.noise_reduction = s["input_audio_noise_reduction"]
        if "turn_detection" in s:
            self.turn_detection = parse_turn_detection(s["turn_detection"], "session.turn_detection", self.turn_detection)

    def parse_voice(self, value: Any, param: str) -> str:
        check_type(value, (str, dict), param)
        if isinstance(value, dict):
            value = value.get("id")
        if value not in self.voices:
            raise EventError("invalid_value", f"Invalid value for '{param}': '{value}'. Supported voices are: "
                             + ", ".join(f"'{v}'" for v in self.voices) + ".", param)
        return value

    # --- what the pipeline needs -------------------------------------------

    def settings(self) -> SessionSettings:
        td = self.turn_detection
        if td is None:
            detection = TurnDetection(type=None)
        else:
            silence = td.get("silence_duration_ms", 500)
            if td["type"] == "semantic_vad":
                silence = SEMANTIC_EAGERNESS_MS[td.get("eagerness", "auto")]
            detection = TurnDetection(
                type=td["type"], threshold=td.get("threshold", 0.5), prefix_padding_ms=td.get("prefix_padding_ms", 300),
                silence_duration_ms=silence, create_response=td.get("create_response", True),
                interrupt_response=td.get("interrupt_response", True), idle_timeout_ms=td.get("idle_timeout_ms"),
            )
        return SessionSettings(
            input_format=self.input_format, output_format=self.output_format, voice=self.voice,
            instructions=self.instructions, output_modalities=tuple(self.output_modalities),
            max_output_tokens=None if self.max_output_tokens == "inf" else int(self.max_output_tokens),
            temperature=self.temperature, turn_detection=detection, transcription=self.transcription is not None,
            transcription_language=(self.transcription or {}).get("language"),
        )

    # --- echo ---------------------------------------------------------------

    def as_ga(self) -> dict[str, Any]:
        return {
            "type": "realtime", "object": "realtime.session", "id": self.id, "model": self.model,
            "output_modalities": list(self.output_modalities), "instructions": self.instructions,
            "audio": {
                "input": {"format": _format_object(self.input_format), "transcription": self.transcription,
                          "noise_reduction": self.noise_reduction, "turn_detection": self.turn_detection},
                "output": {"format": _format_object(self.output_format), "voice": self.voice,
                           "speed": self.extra.get("speed", 1.0)},
            },
            "max_output_tokens": self.max_output_tokens,
            "expires_at": self.created + 3600,
            **{k: v for k, v in self.extra.items() if k not in ("speed", "client_secret")},
        }

    def as_beta(self) -> dict[str, Any]:
        return {
            "object": "realtime.session", "id": self.id, "model": self.model,
            "modalities": ["text", "audio"] if "audio" in self.output_modalities else ["text"],
            "instructions": self.instructions, "voice": self.voice,
            "input_audio_format": GA_TO_BETA_FORMATS[self.input_format],
            "output_audio_format": GA_TO_BETA_FORMATS[self.output_format],
            "input_audio_transcription": self.transcription, "input_audio_noise_reduction": self.noise_reduction,
            "turn_detection": self.turn_detection, "temperature": self.temperature,
            "max_response_output_tokens": self.max_output_tokens, "expires_at": self.created + 3600,
            **{k: v for k, v in self.extra.items() if k not in ("speed", "client_secret")},
        }


def parse_max_tokens(value: Any, param: str) -> int | str:
    if value == "inf":
        return "inf"
    check_type(value, int, param)
    if not 1 <= value <= 4096:
        raise EventError("invalid_value", f"'{param}' must be between 1 and 4096, or 'inf'.", param)
    return value


def parse_modalities(value: Any, param: str, allow_both: bool = False) -> list[str]:
    check_type(value, list, param)
    if not all(isinstance(v, str) for v in value):
        raise EventError("invalid_value", f"Invalid value for '{param}': expected [\"audio\"] or [\"text\"].", param)
    allowed = [["audio"], ["text"]] + ([["text", "audio"], ["audio", "text"]] if allow_both else [])
    if value not in allowed and not (not allow_both and sorted(value) == ["audio", "text"]):
        raise EventError("invalid_value", f"Invalid value for '{param}': expected [\"audio\"] or [\"text\"].", param)
    return ["audio"] if "audio" in value else ["text"]


def parse_ga_format(value: Any, param: str) -> str:
    check_type(value, (dict, str), param)
    fmt = value.get("type") if isinstance(value, dict) else value
    check_type(fmt, str, f"{param}.type" if isinstance(value, dict) else param)
    fmt = BETA_FORMATS.get(fmt, fmt)
    if fmt not in audio.FORMATS:
        raise EventError("invalid_value", f"Invalid value for '{param}': expected one of 'audio/pcm', 'audio/pcmu', 'audio/pcma'.", param)
    if isinstance(value, dict) and fmt == audio.PCM and value.get("rate", 24000) != 24000:
        raise EventError("invalid_value", f"Invalid value for '{param}.rate': only 24000 is supported for audio/pcm.", f"{param}.rate")
    return fmt


def parse_beta_format(value: Any, param: str) -> str:
    check_type(value, str, param)
    if value not in BETA_FORMATS:
        raise EventError("invalid_value", f"Invalid value for '{param}': expected one of 'pcm16', 'g711_ulaw', 'g711_alaw'.", param)
    return BETA_FORMATS[value]


def parse_turn_detection(value: Any, param: str, current: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    check_type(value, dict, param)
    kind = value.get("type", (current or {}).get("type", "server_vad"))
    if kind not in ("server_vad", "semantic_vad"):
        raise EventError("invalid_value", f"Invalid value for '{param}.type': expected 'server_vad' or 'semantic_vad'.", f"{param}.type")
    base = dict(current) if current and current.get("type") == kind else {}
    if kind == "server_vad":
        td = {"type": kind, "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
              "create_response": True, "interrupt_response": True, "idle_timeout_ms": None, **base}
        numbers = {"threshold": (0.0, 1.0), "prefix_padding_ms": (0, 10000), "silence_duration_ms": (0, 10000),
                   "idle_timeout_ms": (1000, 30 * 60 * 1000)}
    else:
        td = {"type": kind, "eagerness": "auto", "create_response": True, "interrupt_response": True, **base}
        numbers = {}
        if "eagerness" in value and value["eagerness"] not in SEMANTIC_EAGERNESS_MS:
            raise EventError("invalid_value", f"Invalid value for '{param}.eagerness': expected low, medium, high or auto.", f"{param}.eagerness")
    for key, (low, high) in numbers.items():
        if key in value and value[key] is not None:
            number = check_type(value[key], (int, float) if key == "threshold" else int, f"{param}.{key}")
            if not low <= number <= high:
                raise EventError("invalid_value", f"'{param}.{key}' must be between {low} and {high}.", f"{param}.{key}")
            td[key] = number
        elif key in value:
            td[key] = None if key == "idle_timeout_ms" else td[key]
    for key in ("create_response", "interrupt_response"):
        if key in value and value[key] is not None:
            td[key] = check_type(value[key], bool, f"{param}.{key}")
    if "eagerness" in value and kind == "semantic_vad":
        td["eagerness"] = value["eagerness"]
    return td
