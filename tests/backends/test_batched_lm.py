"""The continuous-batching scheduler against the real packaged SmolLM2, greedy decoding."""

from __future__ import annotations

import threading

import pytest

from pipelines.backends.batched_lm import BatchedLM, SchedulerStoppedError

PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a long story about a dragon and a knight."}],
    [{"role": "user", "content": "Name three colors."}],
]
STORY = PROMPTS[1]
TOKENS = 16


@pytest.fixture(scope="module")
def batched(lm):
    scheduler = BatchedLM(lm, max_batch=8)
    yield scheduler
    scheduler.close()


@pytest.fixture(scope="module")
def references(lm) -> list[str]:
    return ["".join(lm.generate_stream(p, TOKENS, temperature=0.0)) for p in PROMPTS]


def run_together(batched: BatchedLM, prompts, **kwargs) -> tuple[list[str], list]:
    texts: list[str] = [""] * len(prompts)
    streams = [batched.generate_stream(p, TOKENS, temperature=0.0, **kwargs) for p in prompts]
    start = threading.Barrier(len(prompts))

    def read(i: int) -> None:
        start.wait(timeout=30)
        texts[i] = "".join(streams[i])

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return texts, streams


def test_batched_answers_equal_unbatched_ones_with_greedy_decoding(batched, references):
    before = batched.stats()
    texts, streams = run_together(batched, PROMPTS)
    assert texts == references
    after = batched.stats()
    # Fewer forward passes than tokens: the rows shared steps.
    assert after["tokens"] - before["tokens"] > after["steps"] - before["steps"]
    for stream, prompt in zip(streams, PROMPTS):
        assert stream.input_tokens == batched.count_tokens(prompt)
        assert stream.finish_reason in {"stop", "length"}
        assert 0 < stream.output_tokens <= TOKENS


def test_two_sessions_outputs_never_cross_and_keep_their_own_prefix_caches(batched, lm, references):
    prefixes = [batched.new_prefix_cache(), batched.new_prefix_cache()]
    first = [PROMPTS[0], PROMPTS[2]]
    streams = [batched.generate_stream(p, TOKENS, temperature=0.0, prefix=c) for p, c in zip(first, prefixes)]
    texts = ["", ""]
    threads = [threading.Thread(target=lambda i=i: texts.__setitem__(i, "".join(streams[i]))) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert texts == [references[0], references[2]]
    # The second turn of each conversation starts from its own cached first turn.
    second = [
        m + [{"role": "assistant", "content": t}, {"role": "user", "content": "And why?"}] for m, t in zip(first, texts)
    ]
    again = [batched.generate_stream(m, 8, temperature=0.0, prefix=c) for m, c in zip(second, prefixes)]
    answers = ["", ""]
    threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, "".join(again[i]))) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert all(s.cached_tokens > 0 for s in again)
    assert answers == ["".join(lm.generate_stream(m, 8, temperature=0.0)) for m in second]


def test_a_cancel_stops_one_row_at_the_next_step_and_not_the_others(batched, references):
    cancel = threading.Event()
    victim = batched.generate_stream(STORY, 200, temperature=0.0, cancel=cancel)
    others = [batched.generate_stream(p, TOKENS, temperature=0.0) for p in (PROMPTS[0], PROMPTS[2])]
    texts = ["", ""]
    threads = [threading.Thread(target=lambda i=i: texts.__setitem__(i, "".join(others[i]))) for i in range(2)]
    for t in threads:
        t.start()
    for seen, _ in enumerate(victim, start=1):
        if seen == 2:
            cancel.set()
    for t in threads:
        t.join(timeout=600)
    assert victim.finish_reason == "cancelled"
    assert victim.output_tokens <= 4  # a step may be in flight when the flag is set
    assert texts == [references[0], references[2]]
    assert all(s.finish_reason in {"stop", "length"} for s in others)


def test_a_request_joins_a_running_batch(batched, lm, references):
    long_stream = batched.generate_stream(STORY, 60, temperature=0.0)
    pieces = iter(long_stream)
    head = [next(pieces) for _ in range(3)]  # the long row is decoding now
    late = "".join(batched.generate_stream(PROMPTS[0], TOKENS, temperature=0.0))
    assert long_stream.finish_reason is None  # it was still running when the late one finished
    rest = "".join(pieces)
    assert late == references[0]
    assert "".join(head) + rest == "".join(lm.generate_stream(STORY, 60, temperature=0.0))


def test_a_closed_scheduler_refuses_new_requests(lm):
    scheduler = BatchedLM(lm, max_batch=2)
    scheduler.close()
    with pytest.raises(SchedulerStoppedError):
        list(scheduler.generate_stream(PROMPTS[0], 4, temperature=0.0))


def test_two_lm_stages_on_one_scheduler_answer_and_one_cancel_stays_in_its_session(batched, references):
    from dataclasses import replace

    from pipelines.config import SessionSettings
    from pipelines.messages import ResponseEnd, ResponseRequest, TextDelta, UserTurn
    from pipelines.stages.base import SessionContext
    from pipelines.stages.lm import LmStage

    settings = replace(SessionSettings(), output_modalities=("text",), temperature=0.0, max_output_tokens=TOKENS)
    contexts = [SessionContext(), SessionContext()]
    stages = []
    for context in contexts:
        context.settings = settings
        stages.append(LmStage(context, batched, max_new_tokens=TOKENS))
    outputs: list[list] = [[], []]
    requests = [ResponseRequest.from_settings(settings, 0, response_id=f"resp_{i}") for i in range(2)]

    def talk(i: int, prompt: str) -> None:
        turn = UserTurn(generation=0, item_id=f"item_{i}", text=prompt, create_response=False)
        list(stages[i].process(turn))
        for out in stages[i].process(requests[i]):
            outputs[i].append(out)
            if i == 1 and isinstance(out, TextDelta):
                contexts[1].cancel("resp_1", "client_cancelled")

    threads = [
        threading.Thread(target=talk, args=(0, PROMPTS[0][0]["content"])),
        threading.Thread(target=talk, args=(1, STORY[0]["content"])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    ends = [out[-1] for out in outputs]
    assert all(isinstance(end, ResponseEnd) for end in ends)
    assert ends[0].status in {"completed", "incomplete"}
    assert "".join(o.delta for o in outputs[0] if isinstance(o, TextDelta)) == references[0]
    assert all(o.response_id == "resp_0" for o in outputs[0] if isinstance(o, TextDelta))
    assert ends[1].status == "cancelled"
    assert ends[1].output_tokens <= 4
