"""Function calling through the LM stage with SmolLM2-135M on the transformers engine, on the CPU.

The stage is driven directly: a ``ResponseRequest`` with tools goes in, and the
messages it yields are what the session and the TTS stage would get.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from bench.tool_set import TOOLS
from pipelines.messages import (
    AddItem,
    FunctionCallArgumentsDelta,
    FunctionCallDone,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionCallStarted,
    HistoryItem,
    ResponseEnd,
    ResponseRequest,
    TextForSpeech,
    ToolChoice,
)
from pipelines.stages.base import SessionContext
from pipelines.stages.lm import LmStage
from pipelines.tools import parse_tools

pytestmark = pytest.mark.real_models

INSTRUCTIONS = (
    "You are a helpful voice assistant. Answer briefly, in one or two short sentences, "
    "in plain spoken English without lists or markup."
)
ALL_TOOLS = parse_tools(TOOLS)
SCHEMAS = {tool.name: tool.parameters for tool in ALL_TOOLS}


FEW_TOOLS = tuple(tool for tool in ALL_TOOLS if tool.name in ("get_weather", "book_table"))


def request(
    choice: ToolChoice, temperature: float = 0.8, tools=ALL_TOOLS, max_tokens: int | None = None
) -> ResponseRequest:
    return ResponseRequest(
        generation=0,
        response_id="resp_1",
        instructions=INSTRUCTIONS,
        output_modalities=("audio",),
        max_output_tokens=max_tokens,
        voice="alloy",
        output_format="audio/pcm",
        temperature=temperature,
        tools=tools,
        tool_choice=choice,
    )


def respond(lm, history: list, req: ResponseRequest) -> tuple[LmStage, list]:
    stage = LmStage(SessionContext(), lm)
    for entry in history:
        list(stage.process(AddItem(generation=0, item=entry)))
    return stage, list(stage.process(req))


def of(kind, messages: list) -> list:
    return [m for m in messages if isinstance(m, kind)]


def spoken(messages: list) -> str:
    return " ".join(m.text for m in of(TextForSpeech, messages))


def the_call(messages: list) -> FunctionCallDone:
    (started,) = of(FunctionCallStarted, messages)
    (done,) = of(FunctionCallDone, messages)
    assert (started.item_id, started.call_id, started.name) == (done.item_id, done.call_id, done.name)
    assert "".join(d.delta for d in of(FunctionCallArgumentsDelta, messages)) == done.arguments
    jsonschema.validate(json.loads(done.arguments), SCHEMAS[done.name])
    return done


def user(text: str) -> HistoryItem:
    return HistoryItem("item_user", "user", text)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("set_timer", "Set a timer for 10 minutes for the pasta."),
        ("book_table", "Book a table for four at Luigi's at 19:30."),
        ("add_to_shopping_list", "Add two bottles of milk to my shopping list."),
    ],
)
def test_a_named_function_is_called_with_schema_valid_arguments_and_nothing_is_spoken(lm, name, text):
    stage, messages = respond(lm, [user(text)], request(ToolChoice("function", name)))
    done = the_call(messages)
    assert done.name == name
    assert of(TextForSpeech, messages) == []
    assert of(ResponseEnd, messages)[0].status == "completed"
    assert stage.history[done.item_id] == FunctionCallItem(done.item_id, done.call_id, name, done.arguments)


def test_required_makes_the_model_call_one_of_the_tools(lm):
    _, messages = respond(lm, [user("What's the weather in Paris?")], request(ToolChoice("required"), tools=FEW_TOOLS))
    done = the_call(messages)
    assert done.name in SCHEMAS
    assert spoken(messages) == ""


def test_auto_speaks_when_the_request_needs_no_tool(lm):
    stage, messages = respond(
        lm, [user("What is the capital of France?")], request(ToolChoice("auto"), 0.0, FEW_TOOLS, 24)
    )
    assert of(FunctionCallStarted, messages) == []
    text = spoken(messages)
    assert "Paris" in text and "<" not in text
    assert [type(entry) for entry in stage.history.values()] == [HistoryItem, HistoryItem]


def test_tool_choice_none_speaks_even_for_a_tool_shaped_request(lm):
    _, messages = respond(
        lm,
        [user("Please reserve a table at Sakura for two people at 20:00.")],
        request(ToolChoice("none"), 0.0, FEW_TOOLS, 24),
    )
    assert of(FunctionCallStarted, messages) == []
    assert spoken(messages) and "tool_call" not in spoken(messages)


def test_a_function_result_in_the_history_leads_to_a_spoken_answer(lm):
    history = [
        user("What's the weather in Paris?"),
        FunctionCallItem("item_call", "call_1", "get_weather", '{"city": "Paris"}'),
        FunctionCallOutputItem("item_out", "call_1", '{"city": "Paris", "sky": "sunny", "temperature_c": 24}'),
    ]
    stage, messages = respond(lm, history, request(ToolChoice("auto"), 0.0, FEW_TOOLS, 32))
    assert of(FunctionCallStarted, messages) == []
    text = spoken(messages)
    assert text and "<" not in text
    assert any(word in text.lower() for word in ("sunny", "24")), text
    assert isinstance(list(stage.history.values())[-1], HistoryItem)


def test_cancelling_mid_call_leaves_no_finished_call_and_nothing_in_the_history(lm):
    stage = LmStage(SessionContext(), lm)
    list(stage.process(AddItem(generation=0, item=user("Send a message to Anna saying I will be late."))))
    messages = []
    for message in stage.process(request(ToolChoice("function", "send_message"))):
        messages.append(message)
        if isinstance(message, FunctionCallStarted):
            stage.context.cancel("resp_1", "client_cancelled")
    assert len(of(FunctionCallStarted, messages)) == 1
    assert of(FunctionCallDone, messages) == []
    assert of(ResponseEnd, messages)[0].status == "cancelled"
    assert not any(isinstance(entry, FunctionCallItem) for entry in stage.history.values())
