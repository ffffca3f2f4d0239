"""The LM stage pauses a response at a call the server runs (an MCP tool) and resumes it with the result.

Driven by the FAKE language model (no model here): it calls NAME when the user says ``call NAME {json}``
and reads a tool result back as "The tool said: <result>.".
"""

from __future__ import annotations

from dataclasses import replace

from pipelines.loopback import FakeLanguageModel
from pipelines.messages import (
    AddItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    HistoryItem,
    ResponseEnd,
    ResponseRequest,
    ResponseResume,
    ResponseStarted,
    TextForSpeech,
    ToolChoice,
    ToolsPending,
)
from pipelines.stages.base import SessionContext
from pipelines.stages.lm import LmStage
from pipelines.stages.lm_output import MAX_TOOL_ROUNDS

WEATHER = FunctionTool("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}})


def request(**fields) -> ResponseRequest:
    return ResponseRequest(
        generation=0,
        response_id="resp_1",
        instructions="",
        output_modalities=("audio",),
        max_output_tokens=None,
        voice="alloy",
        output_format="audio/pcm",
        temperature=0.0,
        tools=(WEATHER,),
        **{"hosted": frozenset({"get_weather"}), **fields},
    )


def paused(user_text: str = 'call get_weather {"city": "Paris"}', **fields) -> tuple[LmStage, list]:
    stage = LmStage(SessionContext(), FakeLanguageModel())
    list(stage.process(AddItem(generation=0, item=HistoryItem("item_u", "user", user_text))))
    return stage, list(stage.process(request(**fields)))


def spoken(out: list) -> str:
    return " ".join(m.text for m in out if isinstance(m, TextForSpeech))


def test_a_hosted_call_pauses_the_response_and_its_result_is_answered_in_the_same_response():
    stage, out = paused()
    assert not [m for m in out if isinstance(m, ResponseEnd)]
    pending = out[-1]
    assert isinstance(pending, ToolsPending) and pending.response_id == "resp_1"
    (call,) = pending.calls
    assert (call.name, call.arguments, call.output) == ("get_weather", '{"city": "Paris"}', None)

    out = list(
        stage.process(ResponseResume(generation=0, response_id="resp_1", results=(replace(call, output="sunny"),)))
    )
    assert spoken(out) == "The tool said: sunny."
    end = out[-1]
    assert isinstance(end, ResponseEnd) and (end.response_id, end.status) == ("resp_1", "completed")
    assert end.output_tokens > len(call.arguments.split())  # both rounds count
    history = list(stage.history.values())
    assert history[1] == replace(call, output="sunny")  # the call holds its result, in its place
    assert history[2] == HistoryItem(history[2].item_id, "assistant", "The tool said: sunny.")


def test_a_function_call_still_ends_the_response_for_the_client_to_run():
    stage, out = paused(hosted=frozenset())
    assert isinstance(out[-1], ResponseEnd) and not [m for m in out if isinstance(m, ToolsPending)]


def test_finish_ends_a_paused_response_without_generating():
    stage, _ = paused()
    out = list(stage.process(ResponseResume(generation=0, response_id="resp_1", finish=True)))
    assert [type(m) for m in out] == [ResponseEnd] and out[0].status == "completed"


def test_a_response_cancelled_while_paused_ends_cancelled_when_resumed():
    stage, out = paused()
    stage.context.cancel("resp_1", "client_cancelled")
    call = out[-1].calls[0]
    out = list(
        stage.process(ResponseResume(generation=0, response_id="resp_1", results=(replace(call, output="sunny"),)))
    )
    assert [type(m) for m in out] == [ResponseEnd]
    assert (out[0].status, out[0].reason) == ("cancelled", "client_cancelled")


def test_an_awaiting_request_starts_paused_and_an_approved_result_is_answered():
    stage = LmStage(SessionContext(), FakeLanguageModel())
    for entry in (HistoryItem("item_u", "user", "weather?"), FunctionCallItem("item_c", "call_1", "get_weather", "{}")):
        list(stage.process(AddItem(generation=0, item=entry)))
    out = list(stage.process(request(awaiting=True)))
    assert [type(m) for m in out] == [ResponseStarted, ToolsPending] and out[1].calls == ()
    out = list(
        stage.process(
            ResponseResume(
                generation=0, response_id="resp_1", results=(FunctionCallOutputItem("item_o", "call_1", "rainy"),)
            )
        )
    )
    assert spoken(out) == "The tool said: rainy." and isinstance(out[-1], ResponseEnd)


def test_a_required_call_is_required_once_and_the_rounds_are_bounded():
    stage, out = paused(tool_choice=ToolChoice("required"))
    call = out[-1].calls[0]
    out = list(
        stage.process(ResponseResume(generation=0, response_id="resp_1", results=(replace(call, output="sunny"),)))
    )
    assert spoken(out) == "The tool said: sunny."  # auto after the call: it answers

    class Insistent(FakeLanguageModel):  # a FAKE model that calls again whatever it is told
        def generate_stream(self, messages, max_new_tokens, temperature, cancel=None, tools=(), **options):
            messages = [*messages, {"role": "user", "content": 'call get_weather {"city": "Oslo"}'}]
            return super().generate_stream(
                messages, max_new_tokens, temperature, cancel, tools=tools, tool_choice=ToolChoice("required")
            )

    stage = LmStage(SessionContext(), Insistent())
    out = list(stage.process(request()))
    for _ in range(MAX_TOOL_ROUNDS + 2):  # bounded
        if isinstance(out[-1], ResponseEnd):
            break
        call = out[-1].calls[0]
        out = list(
            stage.process(ResponseResume(generation=0, response_id="resp_1", results=(replace(call, output="x"),)))
        )
    assert isinstance(out[-1], ResponseEnd)


def test_the_session_end_forgets_paused_responses():
    stage, _ = paused()
    stage.on_session_end()
    assert list(stage.process(ResponseResume(generation=0, response_id="resp_1", finish=True))) == []
