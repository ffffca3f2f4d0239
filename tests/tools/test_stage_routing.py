"""The LM stage's routing of calls and text, driven by the FAKE language model (no model here)."""

from __future__ import annotations

from pipelines.loopback import FakeLanguageModel
from pipelines.messages import (
    AddItem,
    FunctionCallDone,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionCallStarted,
    FunctionTool,
    HistoryItem,
    ResponseEnd,
    ResponseRequest,
    TextForSpeech,
    ToolChoice,
)
from pipelines.stages.base import SessionContext
from pipelines.stages.lm import LmStage

WEATHER = FunctionTool("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}})


class FakeRogueModel(FakeLanguageModel):
    """A FAKE model that always writes a call of a function nobody offered."""

    def generate_stream(self, messages, max_new_tokens, temperature, cancel=None, **options):
        stream = super().generate_stream(messages, max_new_tokens, temperature, cancel)
        stream.words = ('<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>').split(" ")
        return stream


def run(user_text: str, tools=(WEATHER,), choice=ToolChoice("auto"), history=(), model=None) -> tuple[LmStage, list]:
    stage = LmStage(SessionContext(), model or FakeLanguageModel())
    for entry in [HistoryItem("item_u", "user", user_text), *history]:
        list(stage.process(AddItem(generation=0, item=entry)))
    req = ResponseRequest(
        generation=0,
        response_id="resp_1",
        instructions="",
        output_modalities=("audio",),
        max_output_tokens=None,
        voice="alloy",
        output_format="audio/pcm",
        temperature=0.8,
        tools=tuple(tools),
        tool_choice=choice,
    )
    return stage, list(stage.process(req))


def test_a_call_becomes_call_messages_and_a_history_entry_and_speaks_nothing():
    stage, out = run('call get_weather {"city": "Paris"}')
    (done,) = [m for m in out if isinstance(m, FunctionCallDone)]
    assert done.arguments == '{"city": "Paris"}'
    assert [m for m in out if isinstance(m, TextForSpeech)] == []
    assert isinstance(out[-1], ResponseEnd) and out[-1].status == "completed"
    assert list(stage.history.values())[-1] == FunctionCallItem(
        done.item_id, done.call_id, "get_weather", done.arguments
    )


def test_a_call_of_a_function_not_offered_is_dropped_and_not_spoken():
    stage, out = run("hello", model=FakeRogueModel())
    assert not [m for m in out if isinstance(m, (FunctionCallStarted, FunctionCallDone))]
    assert [m for m in out if isinstance(m, TextForSpeech)] == []
    assert not any(isinstance(entry, FunctionCallItem) for entry in stage.history.values())


def test_a_tool_result_reaches_the_model_as_a_tool_message():
    history = (
        FunctionCallItem("item_c", "call_1", "get_weather", '{"city": "Paris"}'),
        FunctionCallOutputItem("item_o", "call_1", "sunny"),
    )
    _, out = run("weather?", history=history)
    assert " ".join(m.text for m in out if isinstance(m, TextForSpeech)) == "The tool said: sunny."
