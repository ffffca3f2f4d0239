"""Numeric bounds in llama.cpp grammars: exactly the numbers in range, checked number by number, and in a call."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import jsonschema
import pytest

from pipelines.backends._gbnf_bounds import (
    integer_bounds,
    integer_range,
    json_schema_to_gbnf,
    number_places,
    number_range,
)


def as_regex(expression: str) -> re.Pattern[str]:
    """The GBNF that ``integer_range`` and ``number_range`` write (quoted digits, "-" and ".", classes, ``*``,
    ``?``, groups) as a regex."""
    return re.compile(re.sub(r'"([0-9.-]+)"', lambda m: re.escape(m.group(1)), expression).replace(" ", ""))


@pytest.mark.parametrize(
    "low, high",
    [
        (0, 0),
        (0, 9),
        (1, 20),
        (0, 600),
        (7, 7),
        (13, 17),
        (95, 1005),
        (1, 12),
        (100, 199),
        (-5, 5),
        (-120, -3),
        (None, 42),
        (-7, None),
        (1, None),
        (0, None),
        (58, None),
        (None, -10),
        (None, None),
    ],
)
def test_the_grammar_of_a_range_matches_exactly_the_integers_in_it(low, high):
    pattern = as_regex(integer_range(low, high))
    for number in range(-2500, 2500):
        inside = (low is None or number >= low) and (high is None or number <= high)
        assert bool(pattern.fullmatch(str(number))) == inside, (low, high, number)
    for text in ("007", "-0", "01", "1.5", "+3", ""):
        assert not pattern.fullmatch(text), text


def test_bounds_are_read_from_every_draft():
    assert integer_bounds({"type": "integer", "minimum": 1, "maximum": 20}) == (1, 20)
    assert integer_bounds({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}) == (1, 9)
    assert integer_bounds(
        {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 5, "exclusiveMaximum": True}
    ) == (1, 4)
    assert integer_bounds({"type": "integer", "minimum": 0.5, "maximum": 3.7}) == (1, 3)
    assert integer_bounds({"type": "integer"}) == (None, None)
    with pytest.raises(ValueError):
        integer_range(5, 4)


def written(hundredths: int) -> list[str]:
    """Every way JSON writes ``hundredths / 100`` with at most two digits after the point, and no exponent."""
    whole, part = divmod(abs(hundredths), 100)
    sign = "-" if hundredths < 0 else ""
    forms = [f"{sign}{whole}.{part:02d}"]
    if part % 10 == 0:
        forms.append(f"{sign}{whole}.{part // 10}")
    if part == 0:
        forms.append(f"{sign}{whole}")
    return forms


@pytest.mark.parametrize(
    "low, high",
    [
        (0, 0),
        (50, 10000),
        (5, 95),
        (-250, 375),
        (-1999, -1),
        (1, 1),
        (101, 199),
        (-5, 5),
        (0, 99),
        (999, 1001),
        (None, 150),
        (-333, None),
        (1, None),
        (0, None),
        (None, -7),
        (None, None),
        (-100, 0),
    ],
)
def test_the_grammar_of_a_decimal_range_matches_exactly_the_decimals_in_it(low, high):
    pattern = as_regex(number_range(low, high, places=2))
    for hundredths in range(-2500, 2500):
        inside = (low is None or hundredths >= low) and (high is None or hundredths <= high)
        for text in written(hundredths):
            if text == "-0" or (hundredths == 0 and text.startswith("-")):
                continue
            assert bool(pattern.fullmatch(text)) == inside, (low, high, text)
    for text in ("-0", "01.5", "1.", ".5", "1.005", "1e3", "+1", "", "0.001", "-0.00"):
        assert not pattern.fullmatch(text), text


def test_number_bounds_scale_to_the_places_of_the_most_precise_bound():
    assert number_places({"type": "number", "minimum": 0, "maximum": 100}) == 6
    assert number_places({"type": "number", "minimum": 0.12345678}) == 8
    assert integer_bounds({"type": "number", "minimum": 0.5, "maximum": 40}, 100) == (50, 4000)
    assert integer_bounds({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5}, 100) == (1, 149)
    assert integer_bounds({"type": "number", "minimum": 2.5, "exclusiveMinimum": True}, 10) == (26, None)
    pattern = as_regex(number_range(*integer_bounds({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, 100), 2))
    assert [t for t in ("0", "0.0", "0.01", "0.5", "1", "1.00", "1.01") if pattern.fullmatch(t)] == [
        "0.01",
        "0.5",
        "1",
        "1.00",
    ]
    with pytest.raises(ValueError):
        number_range(5, 4, 2)


SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["party_size", "minutes"],
    "properties": {
        "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
        "minutes": {"type": "integer", "minimum": 0},
    },
}


def test_llama_cpp_compiles_the_grammar_and_the_default_model_stays_in_bounds():
    from llama_cpp import LlamaGrammar

    from pipelines.backends.llama_cpp_lm import LlamaCppLM
    from pipelines.config import FunctionTool, ToolChoice
    from pipelines.tool_calls import CallEnd, CallParser

    grammar = json_schema_to_gbnf(json.dumps(SCHEMA))
    LlamaGrammar.from_string(grammar, verbose=False)
    assert 'party-size ::= (([1-9]) | ("1" [0-9]) | ("2" [0-0])) space' in grammar, grammar
    lm = LlamaCppLM(threads=2, n_ctx=1024)
    tool = FunctionTool("book_table", "Book a table.", SCHEMA)
    asked = [{"role": "user", "content": "Book a table for 45 people for 90 minutes."}]
    text = "".join(lm.generate_stream(asked, 64, 0.0, tools=[tool], tool_choice=ToolChoice("function", "book_table")))
    parser = CallParser()
    [call] = [event for event in [*parser.feed(text), *parser.finish()] if isinstance(event, CallEnd)]
    jsonschema.validate(json.loads(call.arguments), SCHEMA)


THERMOSTAT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["celsius"],
    "properties": {"celsius": {"type": "number", "minimum": 10, "maximum": 30.5}},
}


def test_the_default_model_keeps_a_number_with_a_fraction_in_its_bounds():
    from llama_cpp import LlamaGrammar

    from pipelines.backends.llama_cpp_lm import LlamaCppLM
    from pipelines.config import FunctionTool, ToolChoice
    from pipelines.tool_calls import CallEnd, CallParser

    LlamaGrammar.from_string(json_schema_to_gbnf(json.dumps(THERMOSTAT)), verbose=False)
    lm = LlamaCppLM(threads=2, n_ctx=1024)
    tool = FunctionTool("set_thermostat", "Set the heating.", THERMOSTAT)
    for asked in (
        "Set the heating to 45.5 degrees.",
        "Set the heating to 2.25 degrees.",
        "Set the heating to 21.5 degrees.",
    ):
        messages = [{"role": "user", "content": asked}]
        text = "".join(
            lm.generate_stream(messages, 64, 0.0, tools=[tool], tool_choice=ToolChoice("function", "set_thermostat"))
        )
        parser = CallParser()
        [call] = [event for event in [*parser.feed(text), *parser.finish()] if isinstance(event, CallEnd)]
        arguments = json.loads(call.arguments)
        jsonschema.validate(arguments, THERMOSTAT)
        assert Decimal(str(arguments["celsius"])) <= Decimal("30.5"), (asked, arguments)
