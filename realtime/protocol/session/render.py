"""The session as the client reads it: the GA and beta shapes of ``session.created``/``session.updated`` and of
a transcription session."""

from __future__ import annotations

from typing import Any

from pipelines import audio, tools as tool_parsing
from realtime.protocol.session.config import SessionConfig
from realtime.protocol.session.keys import GA_TO_BETA_FORMATS


def _format_object(fmt: str) -> dict[str, Any]:
    return {"type": fmt, "rate": audio.RATES[fmt]} if fmt == audio.PCM else {"type": fmt}


def as_ga(session: SessionConfig) -> dict[str, Any]:
    if session.transcription_only:
        return as_ga_transcription(session)
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session.id,
        "model": session.model,
        "output_modalities": list(session.output_modalities),
        "instructions": session.instructions,
        "audio": {
            "input": {
                "format": _format_object(session.input_format),
                "transcription": session.transcription,
                "noise_reduction": session.noise_reduction,
                "turn_detection": session.turn_detection,
            },
            "output": {"format": _format_object(session.output_format), "voice": session.voice, "speed": session.speed},
        },
        "max_output_tokens": session.max_output_tokens,
        "include": session.include,
        "expires_at": session.expires_at,
        "tools": tools_json(session),
        "tool_choice": tool_parsing.tool_choice_to_json(session.tool_choice),
        "parallel_tool_calls": session.parallel_tool_calls,
        "tracing": session.tracing,
        "prompt": session.prompt,
        "truncation": session.truncation,
    }


def tools_json(session: SessionConfig) -> list[dict[str, Any]]:
    """The session's tools as offered: functions, then MCP servers (without their headers)."""
    return [tool_parsing.tool_to_json(t) for t in session.tools] + [server.echo for server in session.mcp_servers]


def as_ga_transcription(session: SessionConfig) -> dict[str, Any]:
    """A GA transcription session (``type: "transcription"``): audio in, transcripts out."""
    return {
        "type": "transcription",
        "object": "realtime.transcription_session",
        "id": session.id,
        "audio": {
            "input": {
                "format": _format_object(session.input_format),
                "transcription": session.transcription,
                "noise_reduction": session.noise_reduction,
                "turn_detection": session.turn_detection,
            }
        },
        "include": session.include,
        "expires_at": session.expires_at,
    }


def as_beta_transcription(session: SessionConfig) -> dict[str, Any]:
    """A beta transcription session, as ``transcription_session.updated`` carries it.

    The beta type requires ``client_secret``; a WebSocket session has none of its own, so
    ``value`` is empty and ``expires_at`` is when the session ends.
    """
    return {
        "object": "realtime.transcription_session",
        "id": session.id,
        "client_secret": {"value": "", "expires_at": session.expires_at},
        "modalities": ["text"],
        "input_audio_format": GA_TO_BETA_FORMATS[session.input_format],
        "input_audio_transcription": session.transcription,
        "input_audio_noise_reduction": session.noise_reduction,
        "turn_detection": session.turn_detection,
        "include": session.include,
    }


def as_beta(session: SessionConfig) -> dict[str, Any]:
    return {
        "object": "realtime.session",
        "id": session.id,
        "model": session.model,
        "modalities": ["text", "audio"] if "audio" in session.output_modalities else ["text"],
        "instructions": session.instructions,
        "voice": session.voice,
        "input_audio_format": GA_TO_BETA_FORMATS[session.input_format],
        "output_audio_format": GA_TO_BETA_FORMATS[session.output_format],
        "input_audio_transcription": session.transcription,
        "input_audio_noise_reduction": session.noise_reduction,
        "turn_detection": session.turn_detection,
        "temperature": session.temperature,
        "max_response_output_tokens": session.max_output_tokens,
        "expires_at": session.expires_at,
        "include": session.include,
        "tools": tools_json(session),
        # The beta type has a string here: a named function is given by its name.
        "tool_choice": session.tool_choice.name if session.tool_choice.mode == "function" else session.tool_choice.mode,
        "tracing": session.tracing,
        "speed": session.speed,
        "prompt": session.prompt,
        "truncation": session.truncation,
    }
