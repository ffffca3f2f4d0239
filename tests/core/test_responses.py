"""A response's lifecycle in the conversation: every way it ends gives one explicit final status.

The pipeline is a recording fake (``Port``): these tests feed the conversation the messages a
unit would send and read the server events it answers with.
"""

from __future__ import annotations

import pytest

from pipelines import audio, messages as m
from realtime.protocol.conversation import Conversation, Port
from realtime.protocol.session.config import ResponseOptions, SessionConfig
from realtime.protocol.wire import EventError

SPOKEN = ("audio",)


class Pipeline:
    """A fake unit: records what the conversation submits and cancels."""

    def __init__(self) -> None:
        self.submitted: list[m.Downstream] = []
        self.cancelled: list[tuple[str, str]] = []

    def port(self) -> Port:
        return Port(0, self.submitted.append, lambda response_id, reason: self.cancelled.append((response_id, reason)))


@pytest.fixture
def pipeline() -> Pipeline:
    return Pipeline()


@pytest.fixture
def conversation(pipeline: Pipeline) -> Conversation:
    return Conversation(SessionConfig("sess_life", "gpt-realtime", ("alloy",)), pipeline.port())


def start(conversation: Conversation, response_id: str, modalities: tuple[str, ...] = SPOKEN) -> None:
    conversation.on_output(
        m.ResponseStarted(
            generation=0,
            response_id=response_id,
            item_id=f"item_{response_id}",
            output_modalities=modalities,
            output_format=audio.PCM,
            voice="alloy",
            out_of_band=False,
        )
    )


def speak(conversation: Conversation, response_id: str, sentence: str, ms: int = 100) -> None:
    data = bytes(audio.RATES[audio.PCM] * audio.BYTES_PER_SAMPLE[audio.PCM] * ms // 1000)
    conversation.on_output(m.AudioOut(generation=0, response_id=response_id, data=data, transcript=sentence))


def finish(conversation: Conversation, response_id: str, status: str, **fields) -> list[dict]:
    return conversation.on_output(m.ResponseFinished(generation=0, response_id=response_id, status=status, **fields))


def done(events: list[dict]) -> dict:
    return next(event["response"] for event in events if event["type"] == "response.done")


@pytest.mark.parametrize(
    ("pipeline_status", "status", "details"),
    [
        ("completed", "completed", None),
        ("incomplete", "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}),
        ("cancelled", "cancelled", {"type": "cancelled", "reason": "max_output_tokens"}),
    ],
)
def test_the_pipelines_final_status_is_the_responses(conversation, pipeline_status, status, details):
    start(conversation, "resp_1")
    speak(conversation, "resp_1", "Hello there.")
    response = done(finish(conversation, "resp_1", pipeline_status, reason="max_output_tokens"))
    assert (response["status"], response["status_details"]) == (status, details)
    assert response["output"][0]["status"] == ("completed" if status == "completed" else "incomplete")
    assert conversation.errors == 0 and conversation.responses.active is None


def test_a_failed_response_says_why_in_an_error_and_in_its_details(conversation):
    start(conversation, "resp_1")
    events = finish(
        conversation, "resp_1", "failed", reason="the context is full", error_code="context_length_exceeded"
    )
    error = next(event["error"] for event in events if event["type"] == "error")
    assert (error["type"], error["code"]) == ("invalid_request_error", "context_length_exceeded")
    details = done(events)["status_details"]
    assert details == {
        "type": "failed",
        "error": {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "the context is full"},
    }
    assert conversation.errors == 1


def test_a_status_that_is_not_final_makes_the_response_failed_by_the_server(conversation):
    start(conversation, "resp_1")
    response = done(finish(conversation, "resp_1", "in_progress"))
    assert response["status"] == "failed"
    assert response["status_details"]["error"]["code"] == "response_failed"
    assert "'in_progress'" in response["status_details"]["error"]["message"]
    assert conversation.errors == 1


def test_a_client_cancel_stands_even_when_the_pipeline_completed_the_response_meanwhile(conversation, pipeline):
    start(conversation, "resp_1")
    speak(conversation, "resp_1", "Hello there.")
    assert conversation.cancel_response(None) == []
    assert pipeline.cancelled == [("resp_1", "client_cancelled")]
    response = done(finish(conversation, "resp_1", "completed"))
    assert (response["status"], response["status_details"]) == (
        "cancelled",
        {"type": "cancelled", "reason": "client_cancelled"},
    )


def test_a_barge_in_cancels_the_active_response_as_turn_detected(conversation, pipeline):
    start(conversation, "resp_1")
    conversation.on_output(m.SpeechStarted(generation=0, item_id="item_user", audio_start_ms=0))
    assert pipeline.cancelled == [("resp_1", "turn_detected")]
    assert done(finish(conversation, "resp_1", "cancelled", reason="turn_detected"))["status_details"] == {
        "type": "cancelled",
        "reason": "turn_detected",
    }


def test_an_unknown_response_finishing_changes_nothing(conversation):
    assert finish(conversation, "resp_never_started", "completed") == []
    assert conversation.errors == 0


def test_the_first_of_many_replies_is_truncated_to_what_was_heard(conversation, pipeline):
    for n in range(30):
        start(conversation, f"resp_{n}")
        speak(conversation, f"resp_{n}", f"Sentence one of {n}.")
        speak(conversation, f"resp_{n}", f"Sentence two of {n}.")
        finish(conversation, f"resp_{n}", "completed")
    (event,) = conversation.truncate_item("item_resp_0", 0, 100)
    assert (event["type"], event["audio_end_ms"]) == ("conversation.item.truncated", 100)
    assert conversation.items["item_resp_0"]["content"][0]["transcript"] == "Sentence one of 0."
    assert pipeline.submitted[-1] == m.TruncateItem(generation=0, item_id="item_resp_0", text="Sentence one of 0.")


def test_a_spoken_reply_of_a_response_that_still_runs_can_be_truncated(conversation):
    start(conversation, "resp_1")
    speak(conversation, "resp_1", "Sentence one.", ms=200)
    speak(conversation, "resp_1", "Sentence two.", ms=200)
    conversation.truncate_item("item_resp_1", 0, 300)
    assert conversation.items["item_resp_1"]["status"] == "in_progress"
    with pytest.raises(EventError, match="shorter than 500ms"):
        conversation.truncate_item("item_resp_1", 0, 500)


def test_a_text_reply_cannot_be_truncated(conversation):
    start(conversation, "resp_1", modalities=("text",))
    conversation.on_output(m.TextDelta(generation=0, response_id="resp_1", delta="Hi."))
    finish(conversation, "resp_1", "completed")
    with pytest.raises(EventError, match="Only assistant messages with audio"):
        conversation.truncate_item("item_resp_1", 0, 0)


def test_only_one_response_at_a_time_writes_to_the_conversation(conversation):
    conversation.create_response(ResponseOptions())
    with pytest.raises(EventError, match="already has an active response"):
        conversation.create_response(ResponseOptions())
    conversation.create_response(ResponseOptions(out_of_band=True))


def test_a_response_that_does_not_start_in_time_fails_with_response_timeout_and_is_dropped(
    conversation: Conversation, pipeline: Pipeline
):
    conversation.create_response(ResponseOptions(), event_id="evt_client")
    (req,) = [msg for msg in pipeline.submitted if isinstance(msg, m.ResponseRequest)]
    responses = conversation.responses
    asked = responses.pending[req.response_id].started_at
    assert responses.first_due(30.0) == asked + 30.0
    assert responses.overdue(asked + 29.0, 30.0) == [] and responses.overdue(asked + 31.0, 30.0) == [req.response_id]
    events = conversation.start_timed_out(req.response_id, 30.0)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.done" and kinds.count("error") == 1, kinds
    error = next(event for event in events if event["type"] == "error")["error"]
    assert (error["type"], error["code"], error["event_id"]) == ("server_error", "response_timeout", "evt_client")
    done = events[-1]["response"]
    assert done["status"] == "failed" and done["status_details"]["error"]["code"] == "response_timeout"
    assert pipeline.cancelled == [(req.response_id, "response_timeout")]  # the pipeline drops it when it comes
    assert responses.first_due(30.0) is None and conversation.errors == 1
    assert conversation.start_timed_out(req.response_id, 30.0) == []  # once
    # The LM reaching it late changes nothing the client sees twice: the request was cancelled.
    conversation.create_response(ResponseOptions())  # the session goes on: another response may be asked
