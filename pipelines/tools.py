"""Validation of function tools and tool choices, as a session or a response gives them.

Plain Python for the session layer: each function turns the client's JSON into
the typed values of :mod:`pipelines.messages` or raises
:class:`~pipelines.errors.ToolDefinitionError` naming the parameter at fault
(``tools[2].parameters``, ``tool_choice.name``), so the session answers with an
``error`` event and stays as it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import jsonschema
from jsonschema.validators import validator_for

from pipelines.errors import ToolDefinitionError
from pipelines.messages import FunctionTool, ToolChoice

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MODES = ("auto", "none", "required")
EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


def parse_tools(value: Any, param: str = "tools") -> tuple[FunctionTool, ...]:
    """The function tools of a ``tools`` list; names must be unique."""
    if not isinstance(value, list):
        raise ToolDefinitionError(f"'{param}' must be an array of tools.", param)
    tools: list[FunctionTool] = []
    for index, entry in enumerate(value):
        tool = parse_tool(entry, f"{param}[{index}]")
        if any(t.name == tool.name for t in tools):
            raise ToolDefinitionError(f"Duplicate tool name '{tool.name}'.", f"{param}[{index}].name")
        tools.append(tool)
    return tuple(tools)


def parse_tool(entry: Any, param: str) -> FunctionTool:
    """One ``{"type": "function", "name", "description", "parameters"}`` entry."""
    if not isinstance(entry, dict):
        raise ToolDefinitionError(f"'{param}' must be an object.", param)
    kind = entry.get("type", "function")
    if kind != "function":
        raise ToolDefinitionError(
            f"Unsupported tool type {kind!r}: only 'function' and 'mcp' tools are supported.", f"{param}.type"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ToolDefinitionError(
            f"'{param}.name' must be 1 to 64 letters, digits, underscores or dashes.", f"{param}.name"
        )
    description = entry.get("description")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise ToolDefinitionError(f"'{param}.description' must be a string.", f"{param}.description")
    parameters = entry.get("parameters")
    if parameters is None:
        parameters = dict(EMPTY_OBJECT)
    check_parameters_schema(parameters, f"{param}.parameters")
    return FunctionTool(name=name, description=description, parameters=parameters)


def check_parameters_schema(schema: Any, param: str) -> None:
    """A valid JSON Schema (by its own ``$schema``, else draft 2020-12) describing an object."""
    if not isinstance(schema, dict):
        raise ToolDefinitionError(f"'{param}' must be a JSON Schema object.", param)
    try:
        validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        raise ToolDefinitionError(
            f"'{param}' is not a valid JSON Schema: {exc.message} (at {param}{where}).", param
        ) from None
    kind = schema.get("type", "object")
    if kind != "object":
        raise ToolDefinitionError(f"'{param}' must describe an object (type 'object'), not {kind!r}.", param)
    try:
        json.dumps(schema, allow_nan=False)
    except ValueError:
        raise ToolDefinitionError(f"'{param}' must be plain JSON.", param) from None


def parse_tool_choice(value: Any, tools: Sequence[FunctionTool], param: str = "tool_choice") -> ToolChoice:
    """``"auto"``, ``"none"``, ``"required"`` or ``{"type": "function", "name": ...}`` naming one of ``tools``."""
    if isinstance(value, str):
        if value not in MODES:
            raise ToolDefinitionError(
                f"Invalid value for '{param}': {value!r}. Supported: 'auto', 'none', 'required' "
                "or {'type': 'function', 'name': ...}.",
                param,
            )
        choice = ToolChoice(mode=value)
    elif isinstance(value, dict):
        kind = value.get("type")
        if kind != "function":
            raise ToolDefinitionError(
                f"Invalid value for '{param}.type': {kind!r}. Supported: 'function'.", f"{param}.type"
            )
        name = value.get("name")
        if name is None and isinstance(value.get("function"), dict):  # the Chat Completions shape
            name = value["function"].get("name")
        if not isinstance(name, str) or not name:
            raise ToolDefinitionError(f"'{param}.name' must name a function.", f"{param}.name")
        choice = ToolChoice(mode="function", name=name)
    else:
        raise ToolDefinitionError(f"'{param}' must be a string or an object.", param)
    check_tool_choice(choice, tools, param)
    return choice


def check_tool_choice(choice: ToolChoice, tools: Sequence[FunctionTool], param: str = "tool_choice") -> None:
    """That ``choice`` can be honoured with ``tools`` (a named function exists, ``required`` has tools).

    Call it again whenever the tools change while the choice stays.
    """
    if choice.mode == "function" and not any(tool.name == choice.name for tool in tools):
        raise ToolDefinitionError(f"Tool choice names the unknown function '{choice.name}'.", f"{param}.name")
    if choice.mode == "required" and not tools:
        raise ToolDefinitionError(f"'{param}' is 'required' but no tools are defined.", param)


def tool_to_json(tool: FunctionTool) -> dict[str, Any]:
    """The tool as the Realtime API echoes it."""
    return {"type": "function", "name": tool.name, "description": tool.description, "parameters": tool.parameters}


def tool_choice_to_json(choice: ToolChoice) -> str | dict[str, str]:
    return {"type": "function", "name": choice.name} if choice.mode == "function" else choice.mode
