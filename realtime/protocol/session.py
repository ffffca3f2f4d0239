"""The Realtime session object: merging ``session.update`` (GA nested or beta flat shape) and echoing it."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any

from pipelines import audio, tools as tool_parsing
from pipelines.config import SPEED_RANGE, FunctionTool, SessionSettings, ToolChoice, Truncation, TurnDetection
from pipelines.errors import ToolDefinitionError
from realtime.protocol.events import ClientItem, EventError, ItemReference, check_type, optional, parse_prompt
from realtime.protocol.mcp.config import HostedTool, McpPolicy, McpServer, parse_server
from realtime.protocol.prompts import PromptError, PromptLookup, fill

BETA_FORMATS = {"pcm16": audio.PCM, "g711_ulaw": audio.PCMU, "g711_alaw": audio.PCMA}
GA_TO_BETA_FORMATS = {v: k for k, v in BETA_FORMATS.items()}
EAGERNESS = ("low", "medium", "high", "auto")
MAX_INSTRUCTIONS_BYTES = 128 * 1024
# Replies are heard, not read: short, plain sentences that a TTS voice says well.
DEFAULT_INSTRUCTIONS = (
    "You are a helpful voice assistant. Your replies are spoken aloud, so answer in one or two "
    "short, plain sentences and give the answer first. Never use lists, markdown or emoji. "
    "Write numbers as words."
)
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


def _format_object(fmt: str) -> dict[str, Any]:
    return {"type": fmt, "rate": audio.RATES[fmt]} if fmt == audio.PCM else {"type": fmt}


@dataclass(frozen=True)
class ResponseOptions:
    """A validated ``response.create``: where it goes, its own context, and its overrides of the session."""

    out_of_band: bool = False
    metadata: Any = None
    mcp_servers: tuple[McpServer, ...] = ()  # the response's own MCP servers (their tools are listed first)
    input: tuple[ClientItem | ItemReference, ...] | None = None  # None: the conversation is the context
    overrides: dict[str, Any] = field(default_factory=dict)  # fields of ``ResponseRequest``


class SessionConfig:
    """The session as the client sees it. ``settings()`` gives what the pipeline needs."""

    def __init__(
        self,
        session_id: str,
        model: str,
        voices: tuple[str, ...],
        max_instructions_bytes: int = MAX_INSTRUCTIONS_BYTES,
        lifetime_s: float = 3600,
        token_cap: int = API_MAX_OUTPUT_TOKENS,
        context_tokens: int | None = None,
        mcp_policy: McpPolicy | None = None,
    ) -> None:
        """``lifetime_s``: the longest the session may last (``S2S_MAX_SESSION_SECONDS``), for ``expires_at``.

        ``token_cap``: the most output tokens the LM gives one response (``S2S_LM_MAX_NEW_TOKENS``);
        ``context_tokens``: the LM's context (None: unknown here, ``token_limits`` are checked against it at
        connect); ``mcp_policy``: which MCP servers the session may offer (None: MCP is off).
        """
        self.id = session_id
        self.token_cap = min(token_cap, API_MAX_OUTPUT_TOKENS)
        self.context_tokens = context_tokens
        self.mcp_policy = mcp_policy or McpPolicy()
        self.mcp_servers: tuple[McpServer, ...] = ()
        # The listed tools of the session's MCP servers, by name: what the model may call besides the functions.
        self.mcp_tools: dict[str, HostedTool] = {}
        self.max_instructions_bytes = max_instructions_bytes
        self.model = model
        self.voices = voices
        self.created = int(time.time())
        self.expires_at = self.created + int(lifetime_s)
        self.instructions = DEFAULT_INSTRUCTIONS
        self.output_modalities: list[str] = ["audio"]
        self.input_format = audio.PCM
        self.output_format = audio.PCM
        self.voice = voices[0] if voices else "alloy"
        self.transcription: dict[str, Any] | None = {"model": "whisper-1"}
        self.noise_reduction: dict[str, Any] | None = None
        self.turn_detection: dict[str, Any] | None = dict(TURN_DETECTION_DEFAULTS[DEFAULT_TURN_DETECTION])
        self.max_output_tokens: int | str = "inf"
        self.temperature = DEFAULT_TEMPERATURE
        self.include: list[str] | None = None
        self.type = "realtime"  # or "transcription": VAD and STT only, no responses
        self.audio_produced = False  # once true, the voice and the model are fixed (as the API has it)
        self.tools: tuple[FunctionTool, ...] = ()
        self.tool_choice = ToolChoice()
        self.parallel_tool_calls = True
        self.speed = 1.0  # audio.output.speed, validated here; the TTS side acts on it
        self.tracing: str | dict[str, Any] | None = None
        self.truncation: str | dict[str, Any] = "auto"
        self.prompt: dict[str, Any] | None = None  # the stored prompt the instructions come from (as echoed)

    @property
    def transcription_only(self) -> bool:
        return self.type == "transcription"

    @property
    def logprobs(self) -> bool:
        return LOGPROBS in (self.include or [])

    # --- updates ----------------------------------------------------------

    def update(
        self, session: Any, beta: bool, transcription: bool = False, prompts: PromptLookup | None = None
    ) -> None:
        """Applies a ``session.update`` (``transcription``: a beta ``transcription_session.update``).

        Validates everything before changing anything: a bad value raises :class:`EventError`
        naming its ``param`` and leaves the session as it was. ``prompts`` finds a stored
        ``prompt`` (None: a session that names one is refused).
        """
        check_type(session, dict, "session")
        trial = copy.copy(self)
        trial._prompts = prompts
        if transcription:
            unknown_keys(session, BETA_TRANSCRIPTION_KEYS, "session")
            trial.type = "transcription"
            trial._update_beta(session)
        elif "audio" in session or not beta and ("type" in session or self.transcription_only):
            trial._update_ga(session)
        else:
            unknown_keys(session, BETA_KEYS, "session")
            trial._update_beta(session)
        if self.audio_produced:
            if trial.voice != self.voice:
                raise EventError(
                    "invalid_value",
                    "Cannot update a conversation's voice if assistant audio is present.",
                    "session.audio.output.voice" if not beta else "session.voice",
                )
            if trial.model != self.model:
                raise EventError(
                    "invalid_value",
                    "Cannot update a conversation's model if assistant audio is present.",
                    "session.model",
                )
        del trial._prompts
        self.__dict__.update(trial.__dict__)

    def _update_common(self, s: dict[str, Any]) -> None:
        if "instructions" in s:
            self.instructions = self.parse_instructions(s["instructions"], "session.instructions")
            if s.get("prompt") is None:
                self.prompt = None  # the instructions no longer come from a stored prompt
        if "prompt" in s and s["prompt"] is not None:
            self.prompt, text = self.apply_prompt(s["prompt"], "session.prompt", self._prompts)
            if "instructions" in s and s["instructions"] != text:
                raise EventError(
                    "invalid_value",
                    "Give either 'session.instructions' or 'session.prompt': a stored "
                    "prompt's text becomes the session's instructions.",
                    "session.instructions",
                )
            self.instructions = text
        elif "prompt" in s:
            self.prompt = None
        if "model" in s and s["model"] is not None:
            self.model = parse_model(s["model"], "session.model")
        if "temperature" in s and s["temperature"] is not None:
            self.temperature = parse_temperature(s["temperature"], "session.temperature")
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if key in s and s[key] is not None:
                self.max_output_tokens = parse_max_tokens(s[key], f"session.{key}", self.token_cap)
        if s.get("reasoning") is not None:
            raise no_reasoning("session.reasoning")
        if "tracing" in s:
            self.tracing = parse_tracing(s["tracing"], "session.tracing")
        if "truncation" in s and s["truncation"] is not None:
            self.truncation = parse_truncation(
                s["truncation"], "session.truncation", self.context_tokens, self.token_cap
            )
        if s.get("speed") is not None:  # the beta's place for it
            self.speed = parse_speed(s["speed"], "session.speed")
        if s.get("tools") is not None or s.get("tool_choice") is not None:
            self.tools, self.tool_choice, servers = parse_tools(
                s.get("tools"),
                s.get("tool_choice"),
                self.tools,
                self.tool_choice,
                "session",
                self.mcp_policy,
                self.mcp_servers,
            )
            if servers is not None:
                self.mcp_servers = servers
        if "parallel_tool_calls" in s and s["parallel_tool_calls"] is not None:
            self.parallel_tool_calls = check_type(s["parallel_tool_calls"], bool, "session.parallel_tool_calls")
        if "include" in s:
            self.include = parse_include(s["include"], "session.include")

    def _update_ga(self, s: dict[str, Any]) -> None:
        kind = s.get("type", self.type)
        if kind not in ("realtime", "transcription"):
            raise EventError(
                "invalid_value",
                "Invalid value for 'session.type': expected 'realtime' or 'transcription'.",
                "session.type",
            )
        if kind != self.type and self.audio_produced:
            raise EventError(
                "invalid_value", "Cannot change the type of a session that has produced audio.", "session.type"
            )
        self.type = kind
        unknown_keys(s, GA_TRANSCRIPTION_KEYS if kind == "transcription" else GA_KEYS, "session")
        self._update_common(s)
        if "output_modalities" in s and s["output_modalities"] is not None:
            self.output_modalities = parse_modalities(s["output_modalities"], "session.output_modalities")
        audio_cfg = check_type(s.get("audio") or {}, dict, "session.audio")
        unknown_keys(audio_cfg, {"input", "output"} if kind == "realtime" else {"input"}, "session.audio")
        inp = check_type(audio_cfg.get("input") or {}, dict, "session.audio.input")
        out = check_type(audio_cfg.get("output") or {}, dict, "session.audio.output")
        unknown_keys(inp, GA_AUDIO_INPUT_KEYS, "session.audio.input")
        unknown_keys(out, GA_AUDIO_OUTPUT_KEYS, "session.audio.output")
        if "format" in inp:
            self.input_format = parse_ga_format(inp["format"], "session.audio.input.format")
        if "transcription" in inp:
            self.transcription = parse_transcription(inp["transcription"], "session.audio.input.transcription")
        if "noise_reduction" in inp:
            self.noise_reduction = parse_noise_reduction(inp["noise_reduction"], "session.audio.input.noise_reduction")
        if isinstance(inp.get("turn_detection"), dict) and "type" not in inp["turn_detection"]:
            # The GA types name it (the beta's may leave it out: the current type stays).
            raise EventError(
                "missing_required_parameter",
                "Missing required parameter: 'session.audio.input.turn_detection.type'.",
                "session.audio.input.turn_detection.type",
            )
        if "turn_detection" in inp:
            self.turn_detection = parse_turn_detection(
                inp["turn_detection"], "session.audio.input.turn_detection", self.turn_detection
            )
        if "format" in out:
            self.output_format = parse_ga_format(out["format"], "session.audio.output.format")
        if "voice" in out:
            self.voice = self.parse_voice(out["voice"], "session.audio.output.voice")
        if out.get("speed") is not None:
            self.speed = parse_speed(out["speed"], "session.audio.output.speed")

    def _update_beta(self, s: dict[str, Any]) -> None:
        self._update_common(s)
        if self.mcp_servers:
            raise EventError(
                "invalid_value",
                "MCP tools are a GA feature (the beta protocol has no MCP events): "
                "connect without 'OpenAI-Beta: realtime=v1' to use them.",
                "session.tools",
            )
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
            self.transcription = parse_transcription(
                s["input_audio_transcription"], "session.input_audio_transcription"
            )
        if "input_audio_noise_reduction" in s:
            self.noise_reduction = parse_noise_reduction(
                s["input_audio_noise_reduction"], "session.input_audio_noise_reduction"
            )
        if "turn_detection" in s:
            self.turn_detection = parse_turn_detection(
                s["turn_detection"], "session.turn_detection", self.turn_detection
            )

    def parse_instructions(self, value: Any, param: str) -> str:
        check_type(value, str, param)
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > self.max_instructions_bytes:
            raise EventError(
                "string_above_max_length",
                f"Invalid '{param}': string too long. Expected at most "
                f"{self.max_instructions_bytes} bytes, got {size}.",
                param,
            )
        return value

    def apply_prompt(self, value: Any, param: str, prompts: PromptLookup | None) -> tuple[dict[str, Any], str]:
        """A ``prompt`` reference, validated and found: (the reference as echoed, its text with the variables in)."""
        ref = parse_prompt(value, param)
        if prompts is None:
            raise EventError("invalid_value", f"Invalid '{param}': stored prompts cannot be used here.", param)
        given = {name: v if isinstance(v, str) else v["text"] for name, v in (ref.get("variables") or {}).items()}
        try:
            text = fill(prompts(ref["id"], ref.get("version")), given)
        except PromptError as exc:
            raise EventError(exc.code, exc.message, f"{param}.{exc.field}") from None
        return ref, self.parse_instructions(text, param)

    def parse_voice(self, value: Any, param: str) -> str:
        check_type(value, (str, dict), param)
        if isinstance(value, dict):
            value = value.get("id")
        if value not in self.voices:
            raise EventError(
                "invalid_value",
                f"Invalid value for '{param}': '{value}'. Supported voices are: "
                + ", ".join(f"'{v}'" for v in self.voices)
                + ".",
                param,
            )
        return value

    def response_options(
        self, params: dict[str, Any], beta: bool = False, prompts: PromptLookup | None = None
    ) -> ResponseOptions:
        """The ``response`` of a ``response.create``, validated against this session (its voices, formats)."""
        unknown_keys(params, RESPONSE_BETA_KEYS if beta else RESPONSE_GA_KEYS, "response")
        options: dict[str, Any] = {}
        if params.get("output_modalities") is not None:
            options["output_modalities"] = tuple(
                parse_modalities(params["output_modalities"], "response.output_modalities")
            )
        elif params.get("modalities") is not None:
            options["output_modalities"] = tuple(
                parse_modalities(params["modalities"], "response.modalities", allow_both=True)
            )
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if params.get(key) is not None:
                limit = parse_max_tokens(params[key], f"response.{key}", self.token_cap)
                options["max_output_tokens"] = None if limit == "inf" else int(limit)
        audio_cfg = optional(params, "audio", dict, "response.audio", {})
        unknown_keys(audio_cfg, {"output"}, "response.audio")
        audio_out = optional(audio_cfg, "output", dict, "response.audio.output", {})
        unknown_keys(audio_out, {"format", "voice"}, "response.audio.output")
        if audio_out.get("voice") is not None or params.get("voice") is not None:
            param = "response.voice" if params.get("voice") is not None else "response.audio.output.voice"
            options["voice"] = self.parse_voice(audio_out.get("voice", params.get("voice")), param)
        if audio_out.get("format") is not None:
            options["output_format"] = parse_ga_format(audio_out["format"], "response.audio.output.format")
        if params.get("output_audio_format") is not None:
            options["output_format"] = parse_beta_format(params["output_audio_format"], "response.output_audio_format")
        if params.get("instructions") is not None:
            options["instructions"] = self.parse_instructions(params["instructions"], "response.instructions")
        if params.get("prompt") is not None:
            _, text = self.apply_prompt(params["prompt"], "response.prompt", prompts)
            if options.get("instructions", text) != text:
                raise EventError(
                    "invalid_value",
                    "Give either 'response.instructions' or 'response.prompt': a "
                    "stored prompt's text becomes the response's instructions.",
                    "response.instructions",
                )
            options["instructions"] = text
        if params.get("reasoning") is not None:
            raise no_reasoning("response.reasoning")
        if params.get("temperature") is not None:
            options["temperature"] = parse_temperature(params["temperature"], "response.temperature")
        servers: tuple[McpServer, ...] | None = None
        if params.get("tools") is not None or params.get("tool_choice") is not None:
            options["tools"], options["tool_choice"], servers = parse_tools(
                params.get("tools"),
                params.get("tool_choice"),
                self.tools,
                self.tool_choice,
                "response",
                self.mcp_policy,
                self.mcp_servers,
            )
        if params.get("parallel_tool_calls") is not None:
            options["parallel_tool_calls"] = check_type(
                params["parallel_tool_calls"], bool, "response.parallel_tool_calls"
            )
        conversation = optional(params, "conversation", str, "response.conversation", "auto")
        if conversation not in ("auto", "none"):
            raise EventError(
                "invalid_value",
                f"Invalid value for 'response.conversation': '{conversation[:100]}'. "
                "Supported values are: 'auto' and 'none'.",
                "response.conversation",
            )
        return ResponseOptions(
            mcp_servers=servers or (),
            out_of_band=conversation == "none",
            metadata=parse_metadata(params.get("metadata"), "response.metadata"),
            input=params.get("input"),
            overrides=options,
        )

    # --- what the pipeline needs -------------------------------------------

    def settings(self) -> SessionSettings:
        td = self.turn_detection
        if td is None:
            detection = TurnDetection(type=None)
        else:  # the session's fields are the dataclass's; what a kind lacks keeps the dataclass's default
            detection = TurnDetection(**{name: value for name, value in td.items() if name in _DETECTION_FIELDS})
            if self.transcription_only:  # transcribes only: no responses, so none to make or interrupt
                detection = replace(detection, create_response=False, interrupt_response=False, idle_timeout_ms=None)
        return SessionSettings(
            input_format=self.input_format,
            output_format=self.output_format,
            voice=self.voice,
            speed=self.speed,
            noise_reduction=(self.noise_reduction or {}).get("type"),
            instructions=self.instructions,
            output_modalities=tuple(self.output_modalities),
            max_output_tokens=None if self.max_output_tokens == "inf" else int(self.max_output_tokens),
            temperature=self.temperature,
            turn_detection=detection,
            transcription=self.transcription is not None or self.transcription_only,
            transcription_logprobs=self.logprobs,
            transcription_language=(self.transcription or {}).get("language"),
            transcription_prompt=(self.transcription or {}).get("prompt"),
            tools=self.tools + self.hosted_functions(),
            tool_choice=self.tool_choice,
            truncation=self.truncation_settings(),
            parallel_tool_calls=self.parallel_tool_calls,
            hosted=frozenset(tool.name for tool in self.hosted_tools()),
        )

    def hosted_tools(self) -> list[HostedTool]:
        """The MCP tools the model sees: a function of the same name keeps the name (the tool is left out)."""
        taken = {tool.name for tool in self.tools}
        return [tool for name, tool in self.mcp_tools.items() if name not in taken]

    def hosted_functions(self) -> tuple[FunctionTool, ...]:
        return tuple(tool.function() for tool in self.hosted_tools())

    def truncation_settings(self) -> Truncation:
        if isinstance(self.truncation, str):
            return Truncation(type=self.truncation)
        limits = self.truncation.get("token_limits") or {}
        return Truncation(
            type="retention_ratio",
            retention_ratio=float(self.truncation["retention_ratio"]),
            post_instructions=limits.get("post_instructions"),
        )

    # --- echo ---------------------------------------------------------------

    def as_ga(self) -> dict[str, Any]:
        if self.transcription_only:
            return self.as_ga_transcription()
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": self.id,
            "model": self.model,
            "output_modalities": list(self.output_modalities),
            "instructions": self.instructions,
            "audio": {
                "input": {
                    "format": _format_object(self.input_format),
                    "transcription": self.transcription,
                    "noise_reduction": self.noise_reduction,
                    "turn_detection": self.turn_detection,
                },
                "output": {"format": _format_object(self.output_format), "voice": self.voice, "speed": self.speed},
            },
            "max_output_tokens": self.max_output_tokens,
            "include": self.include,
            "expires_at": self.expires_at,
            "tools": self.tools_json(),
            "tool_choice": tool_parsing.tool_choice_to_json(self.tool_choice),
            "parallel_tool_calls": self.parallel_tool_calls,
            "tracing": self.tracing,
            "prompt": self.prompt,
            "truncation": self.truncation,
        }

    def tools_json(self) -> list[dict[str, Any]]:
        """The session's tools as offered: functions, then MCP servers (without their headers)."""
        return [tool_parsing.tool_to_json(t) for t in self.tools] + [server.echo for server in self.mcp_servers]

    def as_ga_transcription(self) -> dict[str, Any]:
        """A GA transcription session (``type: "transcription"``): audio in, transcripts out."""
        return {
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": self.id,
            "audio": {
                "input": {
                    "format": _format_object(self.input_format),
                    "transcription": self.transcription,
                    "noise_reduction": self.noise_reduction,
                    "turn_detection": self.turn_detection,
                }
            },
            "include": self.include,
            "expires_at": self.expires_at,
        }

    def as_beta_transcription(self) -> dict[str, Any]:
        """A beta transcription session, as ``transcription_session.updated`` carries it.

        The beta type requires ``client_secret``; a WebSocket session has none of its own, so
        ``value`` is empty and ``expires_at`` is when the session ends.
        """
        return {
            "object": "realtime.transcription_session",
            "id": self.id,
            "client_secret": {"value": "", "expires_at": self.expires_at},
            "modalities": ["text"],
            "input_audio_format": GA_TO_BETA_FORMATS[self.input_format],
            "input_audio_transcription": self.transcription,
            "input_audio_noise_reduction": self.noise_reduction,
            "turn_detection": self.turn_detection,
            "include": self.include,
        }

    def as_beta(self) -> dict[str, Any]:
        return {
            "object": "realtime.session",
            "id": self.id,
            "model": self.model,
            "modalities": ["text", "audio"] if "audio" in self.output_modalities else ["text"],
            "instructions": self.instructions,
            "voice": self.voice,
            "input_audio_format": GA_TO_BETA_FORMATS[self.input_format],
            "output_audio_format": GA_TO_BETA_FORMATS[self.output_format],
            "input_audio_transcription": self.transcription,
            "input_audio_noise_reduction": self.noise_reduction,
            "turn_detection": self.turn_detection,
            "temperature": self.temperature,
            "max_response_output_tokens": self.max_output_tokens,
            "expires_at": self.expires_at,
            "include": self.include,
            "tools": self.tools_json(),
            # The beta type has a string here: a named function is given by its name.
            "tool_choice": self.tool_choice.name if self.tool_choice.mode == "function" else self.tool_choice.mode,
            "tracing": self.tracing,
            "speed": self.speed,
            "prompt": self.prompt,
            "truncation": self.truncation,
        }


def parse_tools(
    tools: Any,
    choice: Any,
    current_tools: tuple[FunctionTool, ...],
    current_choice: ToolChoice,
    scope: str,
    mcp_policy: McpPolicy | None = None,
    current_servers: tuple[McpServer, ...] = (),
) -> tuple[tuple[FunctionTool, ...], ToolChoice, tuple[McpServer, ...] | None]:
    """``tools`` and ``tool_choice`` of a session or a response (None: the current value stays).

    Returns the functions, the choice, and the MCP servers (None when ``tools`` was not given). The
    choice is checked against the functions it will be used with, so a named function must be among
    them and ``required`` needs one (or an MCP server: its tools are known only once listed). A bad
    value raises :class:`EventError` naming its ``param`` (``session.tools[1].parameters``,
    ``response.tool_choice.name``, ``session.tools[0].server_url``).
    """
    servers: tuple[McpServer, ...] | None = None
    try:
        parsed = current_tools
        if tools is not None:
            parsed, servers = _parse_tool_list(tools, f"{scope}.tools", mcp_policy or McpPolicy())
        offers_mcp = bool(current_servers if servers is None else servers)
        if choice is None:
            if not (offers_mcp and current_choice.mode == "required"):
                tool_parsing.check_tool_choice(current_choice, parsed, f"{scope}.tool_choice")
            return parsed, current_choice, servers
        if isinstance(choice, str) and choice not in tool_parsing.MODES and any(t.name == choice for t in parsed):
            choice = {"type": "function", "name": choice}  # the beta shape: a function named by a string
        if offers_mcp and choice == "required":
            return parsed, ToolChoice(mode="required"), servers
        return parsed, tool_parsing.parse_tool_choice(choice, parsed, f"{scope}.tool_choice"), servers
    except ToolDefinitionError as exc:
        raise EventError("invalid_value", exc.message, exc.param) from None


def _parse_tool_list(
    value: Any, param: str, policy: McpPolicy
) -> tuple[tuple[FunctionTool, ...], tuple[McpServer, ...]]:
    """A ``tools`` list of functions and MCP servers; names and server labels must be unique."""
    if not isinstance(value, list):
        raise ToolDefinitionError(f"'{param}' must be an array of tools.", param)
    functions: list[FunctionTool] = []
    servers: list[McpServer] = []
    for index, entry in enumerate(value):
        where = f"{param}[{index}]"
        if isinstance(entry, dict) and entry.get("type") == "mcp":
            server = parse_server(entry, where, policy)
            if any(s.label == server.label for s in servers):
                raise ToolDefinitionError(f"Duplicate MCP server_label '{server.label}'.", f"{where}.server_label")
            servers.append(server)
            continue
        tool = tool_parsing.parse_tool(entry, where)
        if any(t.name == tool.name for t in functions):
            raise ToolDefinitionError(f"Duplicate tool name '{tool.name}'.", f"{where}.name")
        functions.append(tool)
    return tuple(functions), tuple(servers)


def unknown_keys(obj: dict[str, Any], known: set[str], param: str) -> None:
    """Rejects a key the API does not know (as the API does: ``unknown_parameter``), naming it."""
    for key in obj:
        if key not in known:
            raise EventError("unknown_parameter", f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}")


def parse_transcription(value: Any, param: str) -> dict[str, Any] | None:
    """``audio.input.transcription``: a model name this server serves with its STT, ``language``, ``prompt``."""
    if value is None:
        return None
    check_type(value, dict, param)
    unknown_keys(value, TRANSCRIPTION_KEYS, param)
    model = "whisper-1" if value.get("model") is None else check_type(value["model"], str, f"{param}.model")
    if model not in TRANSCRIPTION_MODELS:
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}.model': '{model[:100]}'. Supported: "
            + ", ".join(f"'{m}'" for m in TRANSCRIPTION_MODELS)
            + ".",
            f"{param}.model",
        )
    out: dict[str, Any] = {"model": model}
    for key in ("language", "prompt"):
        if value.get(key) is not None:
            out[key] = check_type(value[key], str, f"{param}.{key}")
    if "language" in out and not (2 <= len(out["language"]) <= 3 and out["language"].isalpha()):
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}.language': expected an ISO-639-1 code such as 'en'.",
            f"{param}.language",
        )
    return out


def parse_noise_reduction(value: Any, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    check_type(value, dict, param)
    unknown_keys(value, {"type"}, param)
    kind = value.get("type")
    if kind not in NOISE_REDUCTION_TYPES:
        raise EventError(
            "invalid_value", f"Invalid value for '{param}.type': expected 'near_field' or 'far_field'.", f"{param}.type"
        )
    return {"type": kind}


def parse_include(value: Any, param: str) -> list[str] | None:
    if value is None:
        return None
    check_type(value, list, param)
    for index, entry in enumerate(value):
        if entry != LOGPROBS:
            raise EventError(
                "invalid_value", f"Invalid value for '{param}[{index}]': expected '{LOGPROBS}'.", f"{param}[{index}]"
            )
    return list(value)


def parse_temperature(value: Any, param: str) -> float:
    """A client's sampling temperature, within the beta's range."""
    check_type(value, (int, float), param)
    low, high = BETA_TEMPERATURE_RANGE
    if isinstance(value, bool) or not low <= value <= high:
        raise EventError("invalid_value", f"'{param}' must be between {low} and {high}.", param)
    return float(value)


def parse_max_tokens(value: Any, param: str, cap: int = API_MAX_OUTPUT_TOKENS) -> int | str:
    """An integer the LM will honour, or ``inf`` (this server's cap, ``S2S_LM_MAX_NEW_TOKENS``).

    A number above the cap is refused, not clamped: the client learns the real limit at once, and
    what the session and its responses show is what the LM applies.
    """
    if value == "inf":
        return "inf"
    check_type(value, int, param)
    if value < 1:
        raise EventError(
            "integer_below_min_value", f"Invalid '{param}': expected an integer of at least 1, or 'inf'.", param
        )
    if value > API_MAX_OUTPUT_TOKENS:
        raise EventError(
            "integer_above_max_value", f"Invalid '{param}': expected at most {API_MAX_OUTPUT_TOKENS}, or 'inf'.", param
        )
    if value > cap:
        raise EventError(
            "integer_above_max_value",
            f"Invalid '{param}': this server gives a response at most {cap} "
            f"output tokens (S2S_LM_MAX_NEW_TOKENS); ask for at most {cap}, or 'inf' for that limit.",
            param,
        )
    return value


def parse_speed(value: Any, param: str) -> float:
    """``speed``: a number from 0.25 to 1.5 (the TTS side acts on it)."""
    check_type(value, (int, float), param)
    low, high = SPEED_RANGE
    if not low <= value <= high:
        raise EventError("invalid_value", f"Invalid '{param}': expected a number from {low} to {high}.", param)
    return float(value)


def parse_model(value: Any, param: str) -> str:
    """A model name: every one is answered by this server's configured LM, as at connect."""
    check_type(value, str, param)
    if not value or len(value) > MAX_MODEL_NAME:
        raise EventError(
            "invalid_value", f"Invalid '{param}': expected a model name of 1 to {MAX_MODEL_NAME} characters.", param
        )
    return value


def no_reasoning(param: str) -> EventError:
    return EventError(
        "unsupported_parameter",
        f"Unsupported parameter: '{param}'. No reasoning model runs on this server: leave it out (or null).",
        param,
    )


def parse_tracing(value: Any, param: str) -> str | dict[str, Any] | None:
    """``tracing``: null, ``auto``, or a configuration (``workflow_name``, ``group_id``, ``metadata``).

    Accepted as the SDK's type has it and echoed; the server's own trace of a session is its
    record in the audit admin, which every session gets.
    """
    if value is None or value == "auto":
        return value
    if isinstance(value, str):
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}': '{value[:100]}'. Supported: 'auto', null, or an object.",
            param,
        )
    check_type(value, dict, param)
    unknown_keys(value, TRACING_KEYS, param)
    for key in ("group_id", "workflow_name"):
        optional(value, key, str, f"{param}.{key}")
    return dict(value)


def parse_truncation(value: Any, param: str, context_tokens: int | None, token_cap: int) -> str | dict[str, Any]:
    """``truncation``: ``auto``, ``disabled``, or ``retention_ratio`` with its optional token limit."""
    if isinstance(value, str):
        if value not in ("auto", "disabled"):
            raise EventError(
                "invalid_value",
                f"Invalid value for '{param}': '{value[:100]}'. Supported: 'auto', "
                "'disabled', or a retention_ratio object.",
                param,
            )
        return value
    check_type(value, dict, param)
    unknown_keys(value, {"type", "retention_ratio", "token_limits"}, param)
    if value.get("type") != "retention_ratio":
        raise EventError(
            "invalid_value", f"Invalid value for '{param}.type': expected 'retention_ratio'.", f"{param}.type"
        )
    ratio = value.get("retention_ratio")
    if ratio is None:
        raise EventError(
            "missing_required_parameter",
            f"Missing required parameter: '{param}.retention_ratio'.",
            f"{param}.retention_ratio",
        )
    check_type(ratio, (int, float), f"{param}.retention_ratio")
    if not 0.0 <= ratio <= 1.0:
        raise EventError(
            "invalid_value",
            f"Invalid '{param}.retention_ratio': expected a number from 0.0 to 1.0.",
            f"{param}.retention_ratio",
        )
    out: dict[str, Any] = {"type": "retention_ratio", "retention_ratio": ratio}
    limits = optional(value, "token_limits", dict, f"{param}.token_limits")
    if limits is not None:
        where = f"{param}.token_limits"
        unknown_keys(limits, {"post_instructions"}, where)
        tokens = optional(limits, "post_instructions", int, f"{where}.post_instructions")
        highest = None if context_tokens is None else context_tokens - token_cap
        if tokens is not None and (tokens < 1 or highest is not None and tokens > highest):
            bound = (
                f"from 1 to {highest} (the model's context of {context_tokens} tokens less the {token_cap} "
                "output tokens of a response)"
                if highest is not None
                else "of at least 1"
            )
            raise EventError(
                "invalid_value",
                f"Invalid '{where}.post_instructions': expected an integer {bound}.",
                f"{where}.post_instructions",
            )
        out["token_limits"] = {"post_instructions": tokens} if "post_instructions" in limits else {}
    return out


def parse_metadata(value: Any, param: str) -> dict[str, str] | None:
    """``metadata``: at most 16 pairs, keys of at most 64 characters, string values of at most 512."""
    if value is None:
        return None
    check_type(value, dict, param)
    if len(value) > METADATA_MAX_PAIRS:
        raise EventError(
            "object_above_max_properties",
            f"Invalid '{param}': expected an object with at most {METADATA_MAX_PAIRS} properties, got {len(value)}.",
            param,
        )
    for key, entry in value.items():
        if len(key) > METADATA_MAX_KEY:
            raise EventError(
                "string_above_max_length",
                f"Invalid '{param}': key '{key[:80]}' is longer than {METADATA_MAX_KEY} characters.",
                param,
            )
        check_type(entry, str, f"{param}.{key}")
        if len(entry) > METADATA_MAX_VALUE:
            raise EventError(
                "string_above_max_length",
                f"Invalid '{param}.{key}': expected a string of at most {METADATA_MAX_VALUE} characters.",
                f"{param}.{key}",
            )
    return dict(value)


def parse_modalities(value: Any, param: str, allow_both: bool = False) -> list[str]:
    check_type(value, list, param)
    if not all(isinstance(v, str) for v in value):
        raise EventError("invalid_value", f'Invalid value for \'{param}\': expected ["audio"] or ["text"].', param)
    allowed = [["audio"], ["text"]] + ([["text", "audio"], ["audio", "text"]] if allow_both else [])
    if value not in allowed:
        raise EventError("invalid_value", f'Invalid value for \'{param}\': expected ["audio"] or ["text"].', param)
    return ["audio"] if "audio" in value else ["text"]


def parse_ga_format(value: Any, param: str) -> str:
    check_type(value, (dict, str), param)
    fmt = value.get("type") if isinstance(value, dict) else value
    check_type(fmt, str, f"{param}.type" if isinstance(value, dict) else param)
    fmt = BETA_FORMATS.get(fmt, fmt)
    if fmt not in audio.FORMATS:
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}': expected one of 'audio/pcm', 'audio/pcmu', 'audio/pcma'.",
            param,
        )
    if isinstance(value, dict) and fmt == audio.PCM and value.get("rate", 24000) != 24000:
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}.rate': only 24000 is supported for audio/pcm.",
            f"{param}.rate",
        )
    return fmt


def parse_beta_format(value: Any, param: str) -> str:
    check_type(value, str, param)
    if value not in BETA_FORMATS:
        raise EventError(
            "invalid_value", f"Invalid value for '{param}': expected one of 'pcm16', 'g711_ulaw', 'g711_alaw'.", param
        )
    return BETA_FORMATS[value]


def parse_turn_detection(value: Any, param: str, current: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    check_type(value, dict, param)
    kind = value.get("type", (current or {}).get("type", "server_vad"))
    if kind not in ("server_vad", "semantic_vad"):
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}.type': expected 'server_vad' or 'semantic_vad'.",
            f"{param}.type",
        )
    base = dict(current) if current and current.get("type") == kind else {}
    unknown_keys(value, TURN_DETECTION_KEYS[kind], param)
    td = {**TURN_DETECTION_DEFAULTS[kind], **base}
    if kind == "server_vad":
        numbers = {
            "threshold": (0.0, 1.0),
            "prefix_padding_ms": (0, 10000),
            "silence_duration_ms": (0, 10000),
            "idle_timeout_ms": (1000, 30 * 60 * 1000),
        }
    else:
        numbers = {"idle_timeout_ms": (1000, 30 * 60 * 1000)}
        if "eagerness" in value and (not isinstance(value["eagerness"], str) or value["eagerness"] not in EAGERNESS):
            raise EventError(
                "invalid_value",
                f"Invalid value for '{param}.eagerness': expected low, medium, high or auto.",
                f"{param}.eagerness",
            )
    for key, (low, high) in numbers.items():
        if key in value and value[key] is not None:
            number = check_type(value[key], (int, float) if key == "threshold" else int, f"{param}.{key}")
            if not low <= number <= high:
                raise EventError(
                    "invalid_value", f"'{param}.{key}' must be between {low} and {high}.", f"{param}.{key}"
                )
            td[key] = number
        elif key in value:
            td[key] = None if key == "idle_timeout_ms" else td[key]
    for key in ("create_response", "interrupt_response"):
        if key in value and value[key] is not None:
            td[key] = check_type(value[key], bool, f"{param}.{key}")
    if "eagerness" in value and kind == "semantic_vad":
        td["eagerness"] = value["eagerness"]
    return td
