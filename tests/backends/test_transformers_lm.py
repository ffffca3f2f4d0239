from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipelines.backends import _transformers_cache
from pipelines.backends.transformers_lm import (
    PromptTooLongError,
    TransformersLM,
    default_model,
)

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
STORY = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]


def test_the_default_model_is_the_packaged_gguf():
    folder, name = default_model()
    assert (Path(folder) / name).is_file()


def test_it_streams_an_answer_and_counts_tokens(lm):
    stream = lm.generate_stream(QUESTION, max_new_tokens=40, temperature=0.0)
    pieces = list(stream)
    text = "".join(pieces)
    assert "Paris" in text
    assert stream.input_tokens == lm.count_tokens(QUESTION)
    assert 0 < stream.output_tokens <= 40
    assert stream.finish_reason in {"stop", "length"}


def test_stream_yields_plain_text_pieces(lm):
    pieces = list(lm.generate_stream(QUESTION, max_new_tokens=20, temperature=0.7))
    assert pieces and all(isinstance(p, str) for p in pieces)
    assert "<|im_end|>" not in "".join(pieces)


def test_max_new_tokens_bounds_the_answer(lm):
    stream = lm.generate_stream(STORY, max_new_tokens=5, temperature=0.8, seed=1)
    list(stream)
    assert stream.output_tokens == 5
    assert stream.finish_reason == "length"


def test_cancel_stops_within_one_token(lm):
    cancel = threading.Event()
    stream = lm.generate_stream(STORY, max_new_tokens=200, temperature=0.8, cancel=cancel, seed=2)
    for _ in stream:
        cancel.set()
    assert stream.finish_reason == "cancelled"
    assert stream.output_tokens <= 3  # a piece may wait for a multi-byte character


def test_cancel_before_start_generates_nothing(lm):
    cancel = threading.Event()
    cancel.set()
    stream = lm.generate_stream(STORY, max_new_tokens=50, cancel=cancel)
    assert list(stream) == []
    assert stream.output_tokens == 0


def test_two_threads_generate_independently_on_one_model(lm):
    prompts = [QUESTION, [{"role": "user", "content": "Name three colors."}]]
    expected = ["".join(lm.generate_stream(p, max_new_tokens=30, temperature=0.0)) for p in prompts]
    results: dict[int, str] = {}

    def work(i: int) -> None:
        results[i] = "".join(lm.generate_stream(prompts[i], max_new_tokens=30, temperature=0.0))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[0], results[1]] == expected


def test_a_prompt_longer_than_the_context_is_refused(lm):
    long = [{"role": "user", "content": "word " * (lm.context_length + 10)}]
    with pytest.raises(PromptTooLongError):
        lm.generate_stream(long, max_new_tokens=10)


def test_the_first_load_leaves_a_safetensors_cache(lm, lm_cache_dir):
    entries = list(lm_cache_dir.iterdir())
    assert len(entries) == 1, entries  # no temp dirs left behind
    cached = entries[0]
    assert cached.name.startswith("SmolLM2-135M-Instruct.Q4_1-")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (cached / name).is_file()


def test_a_second_load_reads_the_cache_without_converting(lm, lm_cache_dir, monkeypatch):
    def fail(*_args, **_kwargs):
        raise AssertionError("the GGUF was converted again")

    monkeypatch.setattr(_transformers_cache, "_convert", fail)
    second = TransformersLM(cache_dir=str(lm_cache_dir))
    expected = "".join(lm.generate_stream(QUESTION, max_new_tokens=15, temperature=0.0))
    assert "".join(second.generate_stream(QUESTION, max_new_tokens=15, temperature=0.0)) == expected


def test_racing_cache_writers_leave_one_complete_folder(tmp_path, monkeypatch):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"not really a gguf")
    root = tmp_path / "cache"
    start = threading.Barrier(2, timeout=30)

    def fake_convert(_gguf: Path, out: Path) -> None:
        start.wait()  # both writers convert at the same time
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(_transformers_cache, "_convert", fake_convert)
    results: list[Path | None] = []
    threads = [
        threading.Thread(target=lambda: results.append(_transformers_cache.cached_gguf_folder(gguf, str(root))))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] == results[1] and results[0] is not None
    assert [p.name for p in root.iterdir()] == [results[0].name]
    assert (results[0] / "config.json").is_file()


def test_a_prefix_cache_reuses_the_previous_turn_and_gives_the_same_answer(lm):
    prefix = lm.new_prefix_cache()
    history = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    first = "".join(lm.generate_stream(history, 16, 0.0, prefix=prefix))
    history += [{"role": "assistant", "content": first.strip()}, {"role": "user", "content": "And of Italy?"}]
    plain = "".join(lm.generate_stream(history, 16, 0.0))
    cached_stream = lm.generate_stream(history, 16, 0.0, prefix=prefix)
    cached = "".join(cached_stream)
    assert cached == plain
    assert cached_stream.cached_tokens > cached_stream.input_tokens // 2  # what usage reports as cached_tokens


def test_a_prefix_cache_recovers_from_a_prompt_that_diverges(lm):
    prefix = lm.new_prefix_cache()
    base = [{"role": "system", "content": "Answer briefly."}]
    "".join(lm.generate_stream(base + [{"role": "user", "content": "Tell me about cats."}], 12, 0.0, prefix=prefix))
    other = base + [{"role": "user", "content": "What is two plus two?"}]
    diverged = lm.generate_stream(other, 12, 0.0, prefix=prefix)
    assert "".join(diverged) == "".join(lm.generate_stream(other, 12, 0.0))
    assert 0 < diverged.cached_tokens < lm.count_tokens(other)
