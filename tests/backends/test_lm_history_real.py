"""The LM stage's history with the real SmolLM2 tokenizer (chat template included): 2,000 items fit the
context with a handful of tokenizer calls per prompt, close to the budget and never over it."""

from __future__ import annotations

from pipelines.config import SessionSettings
from pipelines.messages import AddItem, HistoryItem, ResponseRequest
from pipelines.stages.base import CancelFlag, SessionContext
from pipelines.stages.lm import LmStage


class CountingLM:
    """The real model, its tokenizer calls counted."""

    def __init__(self, lm) -> None:
        self.lm, self.calls = lm, 0
        self.context_length = lm.context_length

    def count_tokens(self, messages):
        self.calls += 1
        return self.lm.count_tokens(messages)


def test_2000_items_fit_the_context_in_a_handful_of_tokenizer_calls(lm):
    model = CountingLM(lm)
    context = SessionContext()
    context.reset(1)
    stage = LmStage(context, model, max_history_tokens=10**9)  # keep all: the prompt's trimming must do it
    for index in range(2000):
        role = "user" if index % 2 == 0 else "assistant"
        list(
            stage.process(
                AddItem(
                    generation=1,
                    item=HistoryItem(f"item_{index}", role, f"This is message number {index} of a long chat."),
                )
            )
        )
    assert model.calls <= 2000 + 2  # each item counted once when it came (plus the template's own cost, once)
    req = ResponseRequest.from_settings(SessionSettings(instructions="Answer briefly."), 1, output_modalities=("text",))
    model.calls = 0
    prompt = stage._messages(req, CancelFlag(context, req.response_id, 1))
    assert model.calls <= 6  # was one count of the whole history per message dropped: 49 s for one response
    budget = lm.context_length - stage._max_tokens(req)
    tokens = lm.count_tokens(prompt)
    assert 0.9 * budget <= tokens <= budget
    assert prompt[-1]["content"] == "This is message number 1999 of a long chat."
