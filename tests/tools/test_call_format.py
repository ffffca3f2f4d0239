"""The call format the LM sees and writes, and the streaming parser of its output (pipelines/tool_calls.py)."""

from __future__ import annotations

import json

import pytest

from pipelines.messages import FunctionCallItem, FunctionCallOutputItem, FunctionTool, HistoryItem
from pipelines.tool_calls import (
    ArgumentsPiece,
    CallEnd,
    CallParser,
    CallStart,
    MarkupFilter,
    Text,
    call_head,
    chat_messages,
    plain_messages,
)

WEATHER = FunctionTool(
    "get_weather", "Weather in a city.", {"type": "object", "properties": {"city": {"type": "string"}}}
)
CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "note": "a } and a \\" inside"}}\n</tool_call>'
)


def parse(pieces: list[str]) -> list:
    parser = CallParser()
    out = [event for piece in pieces for event in parser.feed(piece)]
    return out + list(parser.finish())


def merged(events: list) -> list:
    """Adjacent text and argument pieces joined, so results compare whatever the split."""
    out: list = []
    for event in events:
        if out and type(event) is type(out[-1]) and isinstance(event, (Text, ArgumentsPiece)):
            out[-1] = type(event)(out[-1].text + event.text)
        else:
            out.append(event)
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_a_call_streams_as_start_arguments_and_end_however_the_output_is_split(size):
    pieces = [CALL[i : i + size] for i in range(0, len(CALL), size)]
    events = merged(parse(pieces))
    arguments = '{"city": "Paris", "note": "a } and a \\" inside"}'
    assert events == [CallStart("get_weather"), ArgumentsPiece(arguments), CallEnd("get_weather", arguments)]
    assert json.loads(events[-1].arguments)["city"] == "Paris"


def test_plain_text_passes_through_and_text_like_the_tag_is_held_back_only_while_it_could_be_one():
    parser = CallParser()
    assert list(parser.feed("It is sunny <tool")) == [Text("It is sunny ")]
    assert list(parser.feed("box> ok")) == [Text("<toolbox> ok")]
    assert list(parser.finish()) == []
    assert merged(parse(["A less-than sign: <"])) == [Text("A less-than sign: <")]


def test_no_part_of_a_call_comes_out_as_text_and_two_calls_both_come_out():
    two = CALL + "\n" + CALL.replace("Paris", "Rome")
    events = parse([two[i : i + 4] for i in range(0, len(two), 4)])
    assert not [e for e in events if isinstance(e, Text)]
    ends = [e for e in events if isinstance(e, CallEnd)]
    assert [json.loads(e.arguments)["city"] for e in ends] == ["Paris", "Rome"]


def test_text_before_a_call_is_text_and_a_cut_call_has_no_end():
    events = merged(parse(["Let me check. ", CALL[:60]]))
    assert events[0] == Text("Let me check. ")
    assert isinstance(events[1], CallStart) and not any(isinstance(e, CallEnd) for e in events)
    parser = CallParser()
    list(parser.feed(CALL[:30]))
    assert parser.in_call


def test_a_malformed_call_is_dropped_never_spoken():
    bad = '<tool_call>\n{"arguments": {}, "name": "x"}\n</tool_call>Done.'
    assert merged(parse([bad])) == [Text("Done.")]


def test_call_head_is_what_the_parser_starts_a_call_on():
    assert merged(parse([call_head("set_timer") + '{"minutes": 5}}\n</tool_call>'])) == [
        CallStart("set_timer"),
        ArgumentsPiece('{"minutes": 5}'),
        CallEnd("set_timer", '{"minutes": 5}'),
    ]


def test_history_becomes_chat_messages_with_tool_calls_and_tool_results():
    history = [
        HistoryItem("i1", "user", "Weather in Paris?"),
        FunctionCallItem("i2", "call_1", "get_weather", '{"city": "Paris"}'),
        FunctionCallItem("i3", "call_2", "get_weather", "not json"),
        FunctionCallOutputItem("i4", "call_1", '{"sky": "sunny"}'),
    ]
    messages = chat_messages(history)
    assert messages[0] == {"role": "user", "content": "Weather in Paris?"}
    assert messages[1]["role"] == "assistant"
    assert [c["function"]["arguments"] for c in messages[1]["tool_calls"]] == [{"city": "Paris"}, "not json"]
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "name": "get_weather",
        "content": '{"sky": "sunny"}',
    }


def test_without_template_support_tools_calls_and_results_are_written_as_text():
    messages = chat_messages(
        [
            HistoryItem("i1", "user", "Weather in Paris?"),
            FunctionCallItem("i2", "call_1", "get_weather", '{"city": "Paris"}'),
            FunctionCallOutputItem("i3", "call_1", "sunny, 24 C"),
        ]
    )
    plain = plain_messages([{"role": "system", "content": "Be brief."}] + messages, [WEATHER])
    assert plain[0]["role"] == "system" and plain[0]["content"].startswith("Be brief.\n\n")
    assert '"name": "get_weather"' in plain[0]["content"] and "<tools>" in plain[0]["content"]
    assert plain[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    }
    assert plain[3] == {"role": "tool", "content": "<tool_response>\nsunny, 24 C\n</tool_response>"}
    assert all(isinstance(m["content"], str) for m in plain)
    assert plain_messages(messages[:1], []) == [{"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_call_markup_never_reaches_the_user_and_words_do_however_the_text_is_split(size):
    cases = {
        '({"name": "get_weather", "arguments": {"city": "Paris"}})': "",
        "It is sunny (21 degrees) in Paris.": "It is sunny (21 degrees) in Paris.",
        "Done. <tool_response>sunny</tool_response> I asked get_weather.": "Done. sunny I asked get weather.",
        'The result {"status": "ok", "list": [1, 2]} came back, 3 < 4 `x`.': "The result  came back, 3 < 4 x.",
        'Cut at the limit {"name": "get_wea': "Cut at the limit ",
    }
    for text, heard in cases.items():
        markup = MarkupFilter(["get_weather"])
        out = "".join(markup.feed(text[i : i + size]) for i in range(0, len(text), size)) + markup.finish()
        assert out == heard, text
