"""What a session may hold, as the wire names it: the GA and beta keys of a session and of a response, the
formats, the turn detection fields and their defaults, the limits of the API."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from pipelines import audio
from pipelines.config import (
    TurnDetection,
)

BETA_FORMATS = {"pcm16": audio.PCM, "g711_ulaw": audio.PCMU, "g711_alaw": audio.PCMA}
GA_TO_BETA_FORMATS = {v: k for k, v in BETA_FORMATS.items()}
EAGERNESS = ("low", "medium", "high", "auto")
MAX_INSTRUCTIONS_BYTES = 128 * 1024
# The GA API has no temperature: the server decodes greedily (a check with a small model found it right about
# twice as often as sampling at 0.8; bench/quality.py measures both). A client that asks for sampling stays
# within the beta's range.
DEFAULT_TEMPERATURE = 0.0
BETA_TEMPERATURE_RANGE = (0.6, 1.2)
# The API's bounds: ``max_output_tokens`` (below this server's own cap too), ``speed``, ``metadata``.
API_MAX_OUTPUT_TOKENS = 4096
METADATA_MAX_PAIRS, METADATA_MAX_KEY, METADATA_MAX_VALUE = 16, 64, 512
MAX_MODEL_NAME = 256
TRACING_KEYS = {"group_id", "metadata", "workflow_name"}
# What a session may set, by shape (the openai SDK's session types; ``temperature`` is this server's own
# addition for GA). The object the server echoes may be sent back: its read-only keys are ignored.
READ_ONLY = {"id", "object", "expires_at"}
# ``response.create``'s ``response``, by shape (the SDK's ``RealtimeResponseCreateParams``, and the beta's);
# ``temperature`` is this server's addition for GA, as in the session.
RESPONSE_GA_KEYS = {
    "audio",
    "conversation",
    "input",
    "instructions",
    "max_output_tokens",
    "metadata",
    "output_modalities",
    "parallel_tool_calls",
    "prompt",
    "reasoning",
    "tool_choice",
    "tools",
    "temperature",
}
RESPONSE_BETA_KEYS = {
    "conversation",
    "input",
    "instructions",
    "max_response_output_tokens",
    "metadata",
    "modalities",
    "output_audio_format",
    "temperature",
    "tool_choice",
    "tools",
    "voice",
}
GA_KEYS = {
    "type",
    "audio",
    "include",
    "instructions",
    "max_output_tokens",
    "model",
    "output_modalities",
    "parallel_tool_calls",
    "prompt",
    "reasoning",
    "tool_choice",
    "tools",
    "tracing",
    "truncation",
    "temperature",
} | READ_ONLY
GA_TRANSCRIPTION_KEYS = {"type", "audio", "include"} | READ_ONLY
GA_AUDIO_INPUT_KEYS = {"format", "noise_reduction", "transcription", "turn_detection"}
GA_AUDIO_OUTPUT_KEYS = {"format", "speed", "voice"}
BETA_KEYS = {
    "type",
    "client_secret",
    "input_audio_format",
    "input_audio_noise_reduction",
    "input_audio_transcription",
    "instructions",
    "max_response_output_tokens",
    "modalities",
    "model",
    "output_audio_format",
    "speed",
    "temperature",
    "tool_choice",
    "tools",
    "tracing",
    "turn_detection",
    "voice",
    "output_modalities",
    "include",
    "prompt",
    "truncation",
    "max_output_tokens",
} | READ_ONLY
BETA_TRANSCRIPTION_KEYS = {
    "client_secret",
    "include",
    "input_audio_format",
    "input_audio_noise_reduction",
    "input_audio_transcription",
    "modalities",
    "turn_detection",
} | READ_ONLY
TRANSCRIPTION_KEYS = {"model", "language", "prompt"}
# Each kind of turn detection's fields, in the order the session shows them.
TURN_DETECTION_FIELDS = {
    "server_vad": (
        "threshold",
        "prefix_padding_ms",
        "silence_duration_ms",
        "create_response",
        "interrupt_response",
        "idle_timeout_ms",
    ),
    "semantic_vad": ("eagerness", "create_response", "interrupt_response", "idle_timeout_ms"),
}
TURN_DETECTION_KEYS = {kind: {"type", *names} for kind, names in TURN_DETECTION_FIELDS.items()}
# The turn detection a session starts with, and each kind's defaults as the session shows them: the values are
# ``pipelines.config.TurnDetection``'s, the one place they are written (the page reads them from here too).
DEFAULT_TURN_DETECTION = TurnDetection.type
TURN_DETECTION_DEFAULTS: dict[str, dict[str, Any]] = {
    kind: {"type": kind, **{name: getattr(TurnDetection, name) for name in names}}
    for kind, names in TURN_DETECTION_FIELDS.items()
}
_DETECTION_FIELDS = {f.name for f in fields(TurnDetection)}
NOISE_REDUCTION_TYPES = ("near_field", "far_field")
# The OpenAI transcription models a client may name: every one is served by the configured STT (faster-whisper).
TRANSCRIPTION_MODELS = (
    "whisper-1",
    "gpt-4o-transcribe",
    "gpt-4o-mini-transcribe",
    "gpt-4o-mini-transcribe-2025-12-15",
    "gpt-transcribe",
    "gpt-realtime-whisper",
)
LOGPROBS = "item.input_audio_transcription.logprobs"
