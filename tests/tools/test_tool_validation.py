"""Validation of tool definitions and tool choices (pipelines/tools.py)."""

from __future__ import annotations

import pytest

from pipelines.errors import ToolDefinitionError
from pipelines.messages import FunctionTool, ToolChoice
from pipelines.tools import check_tool_choice, parse_tool_choice, parse_tools, tool_choice_to_json, tool_to_json

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TIMER = {
    "type": "function",
    "name": "set_timer",
    "parameters": {"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 0}}},
}


def error_of(call, *args) -> ToolDefinitionError:
    with pytest.raises(ToolDefinitionError) as info:
        call(*args)
    return info.value


def test_function_tools_become_typed_tools_and_echo_back_as_given():
    tools = parse_tools([WEATHER, TIMER])
    assert [t.name for t in tools] == ["get_weather", "set_timer"]
    assert tools[0] == FunctionTool("get_weather", "Weather in a city.", WEATHER["parameters"])
    assert tools[1].description == ""
    assert tool_to_json(tools[0]) == WEATHER


def test_a_tool_without_parameters_takes_an_empty_object():
    (tool,) = parse_tools([{"type": "function", "name": "hang_up"}])
    assert tool.parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ({"name": "x"}, "tools"),
        ([WEATHER, "set_timer"], "tools[1]"),
        ([WEATHER, {"type": "mcp", "server_label": "x"}], "tools[1].type"),
        ([{"type": "function"}], "tools[0].name"),
        ([{"type": "function", "name": "has space"}], "tools[0].name"),
        ([{"type": "function", "name": "x" * 65}], "tools[0].name"),
        ([{"type": "function", "name": "f", "description": 3}], "tools[0].description"),
        ([WEATHER, TIMER, {"type": "function", "name": "f", "parameters": "object"}], "tools[2].parameters"),
        ([WEATHER, TIMER, {"type": "function", "name": "f", "parameters": {"type": "objekt"}}], "tools[2].parameters"),
        ([{"type": "function", "name": "f", "parameters": {"type": "string"}}], "tools[0].parameters"),
        (
            [{"type": "function", "name": "f", "parameters": {"type": "object", "required": "city"}}],
            "tools[0].parameters",
        ),
        ([WEATHER, dict(WEATHER, description="again")], "tools[1].name"),
    ],
)
def test_a_malformed_tool_is_refused_naming_the_param(tools, param):
    assert error_of(parse_tools, tools).param == param


def test_a_bad_schema_says_where_inside_the_schema_it_is_wrong():
    bad = {
        "type": "function",
        "name": "f",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}},
    }
    error = error_of(parse_tools, [WEATHER, bad])
    assert error.param == "tools[1].parameters"
    assert "tools[1].parameters.properties.n.minimum" in error.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", ToolChoice("auto")),
        ("none", ToolChoice("none")),
        ("required", ToolChoice("required")),
        ({"type": "function", "name": "set_timer"}, ToolChoice("function", "set_timer")),
        ({"type": "function", "function": {"name": "set_timer"}}, ToolChoice("function", "set_timer")),
    ],
)
def test_tool_choices_are_parsed(value, expected):
    tools = parse_tools([WEATHER, TIMER])
    assert parse_tool_choice(value, tools) == expected


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ("always", "tool_choice"),
        (3, "tool_choice"),
        ({"type": "mcp", "server_label": "x"}, "tool_choice.type"),
        ({"type": "function"}, "tool_choice.name"),
        ({"type": "function", "name": "book_flight"}, "tool_choice.name"),
    ],
)
def test_a_bad_tool_choice_is_refused_naming_the_param(value, param):
    assert error_of(parse_tool_choice, value, parse_tools([WEATHER, TIMER])).param == param


def test_required_without_tools_is_refused_and_a_choice_is_checked_again_when_the_tools_change():
    assert error_of(parse_tool_choice, "required", ()).param == "tool_choice"
    choice = parse_tool_choice({"type": "function", "name": "set_timer"}, parse_tools([WEATHER, TIMER]))
    assert (
        error_of(check_tool_choice, choice, parse_tools([WEATHER]), "session.tool_choice").param
        == "session.tool_choice.name"
    )
    assert tool_choice_to_json(choice) == {"type": "function", "name": "set_timer"}
    assert tool_choice_to_json(ToolChoice("auto")) == "auto"
