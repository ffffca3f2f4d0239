"""Integer bounds in llama.cpp grammars: exactly the numbers in range, checked number by number, and in a call."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from pipelines.backends._gbnf_bounds import integer_bounds, integer_range, json_schema_to_gbnf


def as_regex(expression: str) -> re.Pattern[str]:
    """The GBNF that ``integer_range`` writes (quoted digits and "-", classes, ``*``, groups) as a regex."""
    return re.compile(re.sub(r'"([0-9-])"', lambda m: re.escape(m.group(1)), expression).replace(" ", ""))


@pytest.mark.parametrize("low, high", [
    (0, 0), (0, 9), (1, 20), (0, 600), (7, 7), (13, 17), (95, 1005), (1, 12), (100, 199), (-5, 5), (-120, -3),
    (None, 42), (-7, None), (1, None), (0, None), (58, None), (None, -10), (None, None),
])
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
    assert integer_bounds({"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 5,
                           "exclusiveMaximum": True}) == (1, 4)
    assert integer_bounds({"type": "integer", "minimum": 0.5, "maximum": 3.7}) == (1, 3)
    assert integer_bounds({"type": "integer"}) == (None, None)
    with pytest.raises(ValueError):
        integer_range(5, 4)


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["party_size", "minutes"],
          "properties": {"party_size": {"type": "integer", "minimum": 1, "maximum": 20},
                         "minutes": {"type": "integer", "minimum": 0}}}


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
