"""The LM's history: bounded in tokens, fitted to the context in linear time, abandoned at once when the session goes.

A FAKE language model counts tokens as words (the loopback profile's rule) and counts its calls.
"""

from __future__ import annotations

import threading
import time

from pipelines.config import SessionSettings
from pipelines.loopback import FakeLanguageModel
from pipelines.messages import AddItem, HistoryItem, ResponseEnd, ResponseRequest
from pipelines.stages.base import SessionContext
from pipelines.stages.lm import LmStage


class CountingFakeLM(FakeLanguageModel):
    """The FAKE model, counting ``count_tokens`` calls and the messages they were given; optionally slow."""

    def __init__(self, context_length: int = 4096, delay_s: float = 0.0) -> None:
        self.context_length = context_length
        self.delay_s = delay_s
        self.calls = 0
        self.messages_counted = 0

    def count_tokens(self, messages: list[dict[str, str]]) -> int:
        self.calls += 1
        self.messages_counted += len(messages)
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().count_tokens(messages)


def stage_with_items(model: CountingFakeLM, count: int, max_history_tokens: int = 0) -> LmStage:
    context = SessionContext()
    context.reset(1)
    stage = LmStage(context, model, max_history_tokens=max_history_tokens)
    for index in range(count):
        list(stage.process(AddItem(generation=1, item=HistoryItem(f"item_{index}", "user", f"short item {index}"))))
    return stage


def request(generation: int = 1) -> ResponseRequest:
    return ResponseRequest.from_settings(
        SessionSettings(instructions="Answer."), generation, output_modalities=("text",)
    )


def test_fitting_10000_items_to_the_context_counts_each_item_once_not_the_whole_history_per_item_dropped():
    model = CountingFakeLM()
    stage = stage_with_items(model, 10_000, max_history_tokens=10**9)  # the whole history kept: trimming must do it
    model.calls = model.messages_counted = 0
    messages = stage._messages(request(), _never_cancelled())
    assert messages[0] == {"role": "system", "content": "Answer."}
    assert messages[-1]["content"] == "short item 9999"  # the newest turns are the ones kept
    kept = len(messages) - 1
    assert 500 < kept < 10_000
    assert model.count_tokens(messages) <= model.context_length - stage._max_tokens(request())
    # One count of the instructions and at most a few of the prompt: linear in what is kept, not quadratic.
    model.calls = model.messages_counted = 0
    stage._messages(request(), _never_cancelled())
    assert model.calls <= 5 and model.messages_counted <= 5 * (kept + 1)


def test_the_history_is_bounded_in_tokens_and_forgets_its_oldest_items_first():
    model = CountingFakeLM()
    stage = stage_with_items(model, 10_000, max_history_tokens=2000)
    assert stage.history_tokens <= 2000
    assert stage.history_tokens == sum(stage._tokens[item_id] for item_id in stage.history)
    assert "item_9999" in stage.history and "item_0" not in stage.history
    assert len(stage.history) == 2000 // 7  # each "short item N" costs 3 words + 4


def test_a_response_over_10000_items_stops_at_once_when_its_session_ends():
    """Reproduces the abandoned thread: 10,000 items, response.create, the session gone after 0.3 s."""
    model = CountingFakeLM(delay_s=0.001)  # a tokenizer call of 1 ms: 10,000 of them would take 10 s
    stage = stage_with_items(model, 0)
    for index in range(10_000):
        item = HistoryItem(f"item_{index}", "user", f"short item {index}")
        stage.history[item.item_id] = item  # as old as they come: no kept counts, each must be counted now
    outputs: list[object] = []
    worker = threading.Thread(target=lambda: outputs.extend(stage._respond(request())), daemon=True)
    worker.start()
    time.sleep(0.3)
    stage.context.reset(2)  # the unit is released: a new generation
    calls_at_end = model.calls
    worker.join(timeout=2.0)
    assert not worker.is_alive(), "the response went on working for a session that had left"
    assert model.calls - calls_at_end <= 2
    end = outputs[-1]
    assert isinstance(end, ResponseEnd) and end.status == "cancelled"


def _never_cancelled():
    class Never:
        def is_set(self) -> bool:
            return False

    return Never()
