"""The OpenAI Chat Completions LM backend against real HTTP servers on loopback.

The answers come from llama-cpp-python's OpenAI-compatible server running the
packaged SmolLM2 GGUF; the failure cases use an engine that is not there, one
that answers 503, and one that answers too late.
"""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from pipelines.backends._breaker import CircuitBreaker
from pipelines.backends.openai_lm import LMEngineError, OpenAIChatLM, tool_choice_param, wire_messages
from pipelines.config import SessionSettings
from pipelines.messages import FunctionTool, ResponseEnd, ResponseRequest, ToolChoice
from pipelines.stages.base import SessionContext
from pipelines.stages.lm import LmStage
from tests.support.server import free_port

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


class _Handler(http.server.BaseHTTPRequestHandler):
    delay_s = 0.0
    status = 503

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.delay_s)
        body = json.dumps({"error": {"message": "engine overloaded", "type": "server_error"}}).encode()
        try:
            self.send_response(self.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up first

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def failing_engine():
    """A loopback HTTP server that answers every completion with 503 (or too late, with ``delay_s``)."""
    handler = type("Handler", (_Handler,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


def test_it_streams_an_answer_from_a_real_llama_cpp_server(llama_server):
    lm = OpenAIChatLM(llama_server, model="smollm2")
    stream = lm.generate_stream(QUESTION, max_new_tokens=24, temperature=0.0)
    pieces = list(stream)
    assert len(pieces) > 1  # streamed, not one block
    assert "Paris" in "".join(pieces)
    assert stream.input_tokens > 5
    assert 0 < stream.output_tokens <= 24
    assert stream.finish_reason in {"stop", "length"}
    assert lm.breaker.state == "closed"


def test_it_passes_tools_natively_and_streams_the_call_in_the_stage_format(llama_server):
    lm = OpenAIChatLM(llama_server, model="smollm2")
    tools = [
        FunctionTool(
            "get_weather",
            "The weather in a city",
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        )
    ]
    choice = ToolChoice("function", "get_weather")
    stream = lm.generate_stream(
        [{"role": "user", "content": "What is the weather in Paris?"}],
        max_new_tokens=40,
        temperature=0.0,
        tools=tools,
        tool_choice=choice,
    )
    text = "".join(stream)
    assert text.startswith('<tool_call>\n{"name": "get_weather", "arguments": ')
    assert text.endswith("}\n</tool_call>")
    body = text[len("<tool_call>\n") : -len("\n</tool_call>")]
    call = json.loads(body)
    assert call["name"] == "get_weather"
    assert isinstance(call["arguments"], dict)


def test_a_cancel_stops_the_stream(llama_server):
    lm = OpenAIChatLM(llama_server, model="smollm2")
    cancel = threading.Event()
    stream = lm.generate_stream(
        [{"role": "user", "content": "Write a long story about a dragon."}],
        max_new_tokens=200,
        temperature=0.0,
        cancel=cancel,
    )
    count = 0
    for _ in stream:
        count += 1
        cancel.set()
    assert count == 1
    assert stream.finish_reason == "cancelled"


def test_an_engine_that_is_down_fails_clearly_and_the_breaker_stops_calling_it():
    lm = OpenAIChatLM(f"http://127.0.0.1:{free_port()}/v1", model="m", breaker=CircuitBreaker("the LM engine", 2, 30.0))
    for _ in range(2):
        with pytest.raises(LMEngineError, match="cannot be reached"):
            list(lm.generate_stream(QUESTION, 8))
    assert lm.breaker.state == "open"
    with pytest.raises(LMEngineError, match="unavailable after 2 failed call"):
        list(lm.generate_stream(QUESTION, 8))


def test_a_5xx_answer_fails_with_the_status_and_counts_against_the_engine(failing_engine):
    url, _handler = failing_engine
    lm = OpenAIChatLM(url, model="m", breaker=CircuitBreaker("the LM engine", 1, 30.0))
    with pytest.raises(LMEngineError, match="answered 503"):
        list(lm.generate_stream(QUESTION, 8))
    assert lm.breaker.state == "open"


def test_a_4xx_answer_fails_but_does_not_open_the_breaker(failing_engine):
    url, handler = failing_engine
    handler.status = 400
    lm = OpenAIChatLM(url, model="m", breaker=CircuitBreaker("the LM engine", 1, 30.0))
    with pytest.raises(LMEngineError, match="answered 400"):
        list(lm.generate_stream(QUESTION, 8))
    assert lm.breaker.state == "closed"


def test_a_slow_engine_times_out(failing_engine):
    url, handler = failing_engine
    handler.delay_s = 2.0
    lm = OpenAIChatLM(url, model="m", timeout_s=0.3)
    with pytest.raises(LMEngineError, match="did not answer in time"):
        list(lm.generate_stream(QUESTION, 8))


def test_the_lm_stage_ends_the_response_failed_with_the_engine_error():
    lm = OpenAIChatLM(f"http://127.0.0.1:{free_port()}/v1", model="m")
    stage = LmStage(SessionContext(), lm)
    request = ResponseRequest.from_settings(SessionSettings(), 0)
    out = list(stage.process(request))
    end = out[-1]
    assert isinstance(end, ResponseEnd)
    assert end.status == "failed"
    assert "LMEngineError" in end.reason and "cannot be reached" in end.reason


def test_the_breaker_lets_one_trial_through_after_the_cooldown_and_closes_on_success():
    now = [0.0]
    breaker = CircuitBreaker("engine", failures=2, cooldown_s=5.0, clock=lambda: now[0])
    breaker.failed()
    breaker.before_call()  # one failure: still closed
    breaker.failed()
    assert breaker.state == "open"
    now[0] = 5.1
    breaker.before_call()  # the trial
    with pytest.raises(RuntimeError, match="unavailable"):
        breaker.before_call()  # a second caller waits for the trial's outcome
    breaker.failed()  # the trial failed: open again, for twice as long
    now[0] = 5.1 + 9.9
    assert breaker.state == "open"
    now[0] = 5.1 + 10.1
    breaker.before_call()
    breaker.succeeded()
    assert breaker.state == "closed"


def test_messages_and_tool_choice_take_the_wire_shape():
    messages = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "42"},
    ]
    wire = wire_messages(messages)
    assert wire[0]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert wire[0]["content"] is None
    assert "name" not in wire[1]
    assert tool_choice_param(ToolChoice("required")) == "required"
    assert tool_choice_param(ToolChoice("function", "f")) == {"type": "function", "function": {"name": "f"}}
