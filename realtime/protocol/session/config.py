"""The Realtime session's state: merging ``session.update`` (GA nested or beta flat shape), a response's
overrides (``response_options``), and what the pipeline needs (``settings()``)."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import Any

from pipelines import audio
from pipelines.config import (
    DEFAULT_INSTRUCTIONS,
    FunctionTool,
    SessionSettings,
    ToolChoice,
    Truncation,
    TurnDetection,
)
from realtime.protocol.client_items import ClientItem, ItemReference, parse_prompt
from realtime.protocol.mcp.config import HostedTool, McpPolicy, McpServer
from realtime.protocol.prompts import PromptError, PromptLookup, fill
from realtime.protocol.session.fields import (
    no_reasoning,
    parse_beta_format,
    parse_ga_format,
    parse_include,
    parse_max_tokens,
    parse_metadata,
    parse_modalities,
    parse_model,
    parse_noise_reduction,
    parse_speed,
    parse_temperature,
    parse_tools,
    parse_tracing,
    parse_transcription,
    parse_truncation,
    parse_turn_detection,
    unknown_keys,
)
from realtime.protocol.session.keys import (
    _DETECTION_FIELDS,
    API_MAX_OUTPUT_TOKENS,
    BETA_KEYS,
    BETA_TRANSCRIPTION_KEYS,
    DEFAULT_TEMPERATURE,
    DEFAULT_TURN_DETECTION,
    GA_AUDIO_INPUT_KEYS,
    GA_AUDIO_OUTPUT_KEYS,
    GA_KEYS,
    GA_TRANSCRIPTION_KEYS,
    LOGPROBS,
    MAX_INSTRUCTIONS_BYTES,
    RESPONSE_BETA_KEYS,
    RESPONSE_GA_KEYS,
    TURN_DETECTION_DEFAULTS,
)
from realtime.protocol.wire import EventError, check_type, optional


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

    _prompts: PromptLookup | None  # where a stored prompt is found, set on update()'s trial copy only

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
        self.turn_detection: dict[str, Any] | None = (  # None: manual commits only
            dict(TURN_DETECTION_DEFAULTS[DEFAULT_TURN_DETECTION]) if DEFAULT_TURN_DETECTION else None
        )
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
        self._update_instructions(s)
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

    def _update_instructions(self, s: dict[str, Any]) -> None:
        """``instructions``, or a stored ``prompt`` whose text becomes them (both only where they agree)."""
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
        options = self._response_output(params)
        options.update(self._response_instructions(params, prompts))
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

    def _response_output(self, params: dict[str, Any]) -> dict[str, Any]:
        """A response's own output: its modalities, token limit, voice and audio format."""
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
        return options

    def _response_instructions(self, params: dict[str, Any], prompts: PromptLookup | None) -> dict[str, Any]:
        """A response's own ``instructions``, or a stored ``prompt`` whose text becomes them."""
        options: dict[str, Any] = {}
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
        return options

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
