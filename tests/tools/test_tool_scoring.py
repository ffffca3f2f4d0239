"""The function-calling bench's scoring of an answer after a tool's result (bench/tool_scoring.py)."""

from __future__ import annotations

import pytest

from bench.tool_scoring import call_markup, in_words, says_fact
from bench.tool_set import CHAT_REQUESTS, ERROR_REQUESTS, TOOL_REQUESTS, TOOLS, TWO_CALL_REQUESTS, tool_result

NAMES = [tool["name"] for tool in TOOLS]
WEATHER = tool_result("get_weather", {"city": "Paris"})


@pytest.mark.parametrize(
    "text", ["It is 21 degrees.", "Twenty-one degrees and clear.", "twenty one degrees", "About 21.0 degrees"]
)
def test_a_number_counts_as_digits_or_words(text):
    assert says_fact(text, 21)


@pytest.mark.parametrize(
    "text", ["615 minutes", "six hundred and fifteen minutes", "six hundred fifteen minutes", "Six-hundred fifteen"]
)
def test_a_larger_number_counts_with_or_without_and(text):
    assert says_fact(text, 615)


@pytest.mark.parametrize("text", ["It is 210 degrees.", "It is 121 degrees.", "two hundred twenty-one", "1.21"])
def test_a_number_inside_another_does_not_count(text):
    assert not says_fact(text, 21)


def test_an_answer_in_words_carries_a_fact_of_the_result():
    assert in_words("It's sunny in Paris.", WEATHER, NAMES)
    assert not in_words("I have checked it for you.", WEATHER, NAMES)
    assert not in_words("   ", WEATHER, NAMES)


@pytest.mark.parametrize(
    "text, marker",
    [
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>', "<tool_call>"),
        ('{"conditions": "sunny", "temperature": 21}', "{"),
        ("It is sunny, says get_weather.", "get_weather"),
        ("```json sunny 21```", "`"),
        ("Sunny [21 degrees].", "["),
    ],
)
def test_call_markup_is_caught_even_when_the_facts_are_there(text, marker):
    assert marker in call_markup(text, NAMES)
    assert not in_words(text, WEATHER, NAMES)


def test_an_error_result_must_be_told_as_a_failure():
    error = tool_result("book_table", {}, error="the booking system is down")
    assert error.error and '"error"' in error.output
    assert in_words("Sorry, I couldn't book the table: the booking system is down.", error, NAMES)
    assert in_words("I was unable to reach the booking system.", error, NAMES)
    assert not in_words("Your table is booked for eight.", error, NAMES)


def test_every_call_of_the_set_gets_a_result_with_facts_the_answer_can_carry():
    for request in TOOL_REQUESTS + TWO_CALL_REQUESTS + ERROR_REQUESTS:
        for call in request.calls:
            assert call.tool in NAMES
            assert tool_result(call.tool, call.expect).facts, call
    assert tool_result("convert_units", {"value": 10, "from_unit": "kilometers", "to_unit": "miles"}).facts == (6,)


def test_the_request_kinds():
    assert {r.kind for r in TOOL_REQUESTS} == {"tool"} and {r.kind for r in CHAT_REQUESTS} == {"chat"}
    assert {r.kind for r in TWO_CALL_REQUESTS} == {"two calls"} and {r.kind for r in ERROR_REQUESTS} == {"error"}
    assert all(len(r.calls) == 2 for r in TWO_CALL_REQUESTS)
