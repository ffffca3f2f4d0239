"""The validators of the session's and a response's fields: each reads one value and raises an
``EventError`` naming its ``param``."""

from __future__ import annotations

from typing import Any

from pipelines import audio, tools as tool_parsing
from pipelines.config import (
    SPEED_RANGE,
    FunctionTool,
    ToolChoice,
)
from pipelines.errors import ToolDefinitionError
from realtime.protocol.mcp.config import McpPolicy, McpServer, parse_server
from realtime.protocol.session.keys import (
    API_MAX_OUTPUT_TOKENS,
    BETA_FORMATS,
    BETA_TEMPERATURE_RANGE,
    EAGERNESS,
    LOGPROBS,
    MAX_MODEL_NAME,
    METADATA_MAX_KEY,
    METADATA_MAX_PAIRS,
    METADATA_MAX_VALUE,
    NOISE_REDUCTION_TYPES,
    TRACING_KEYS,
    TRANSCRIPTION_KEYS,
    TRANSCRIPTION_MODELS,
    TURN_DETECTION_DEFAULTS,
    TURN_DETECTION_KEYS,
)
from realtime.protocol.wire import EventError, check_type, optional


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
    fmt: str = check_type(
        value.get("type") if isinstance(value, dict) else value,
        str,
        f"{param}.type" if isinstance(value, dict) else param,
    )
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
