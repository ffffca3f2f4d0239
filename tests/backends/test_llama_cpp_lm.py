from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from pipelines.backends import _assembled
from pipelines.backends._llama_adapter import vocab
from pipelines.backends._llama_stream import LlamaCppStream
from pipelines.backends._llama_tools import (
    AutoCallStream,
    CallSequence,
    Grounding,
    _opening,
    answered_call_objects,
    answered_calls,
    call_key,
    current_turn,
)
from pipelines.backends.llama_cpp_lm import DOUBLED_CALL_LAYOUT, LlamaCppLM, fixed_template, resolve_gguf
from pipelines.backends.transformers_lm import PromptTooLongError, default_model
from pipelines.config import DEFAULT_INSTRUCTIONS, FunctionTool, ToolChoice
from pipelines.tool_calls import CALL_CLOSE, CALL_OPEN, CallEnd, CallParser

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
STORY = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
BOOKING = [{"role": "user", "content": "Please book a table for four people at seven tonight, the name is Lee."}]
WEATHER = FunctionTool(
    "get_weather",
    "The current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
BOOK_TABLE = FunctionTool(
    "book_table",
    "Book a table at the restaurant.",
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "party_size", "time"],
        "properties": {
            "name": {"type": "string"},
            "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
            "time": {"type": "string"},
        },
    },
)


@pytest.fixture(scope="module")
def smol() -> LlamaCppLM:
    """The packaged SmolLM2-135M GGUF on llama.cpp: small and quick, two generation slots."""
    folder, name = default_model()
    return LlamaCppLM(str(Path(folder) / name), threads=2, max_contexts=2, n_ctx=1024)


@pytest.fixture(scope="module")
def qwen() -> LlamaCppLM:
    """The default model, Qwen2.5-Coder-0.5B-Instruct, joined from its packages."""
    return LlamaCppLM(threads=2, n_ctx=1024)


def calls(text: str) -> list[CallEnd]:
    parser = CallParser()
    return [event for event in [*parser.feed(text), *parser.finish()] if isinstance(event, CallEnd)]


def test_the_default_model_is_joined_from_its_packages_and_answers(qwen):
    assert Path(qwen.model_path).stat().st_size == _assembled.MODELS["qwen2.5-coder-0.5b-instruct-q4_k_m"].size
    stream = qwen.generate_stream([{"role": "system", "content": "Answer in one short sentence."}] + QUESTION, 24, 0.0)
    assert "paris" in "".join(stream).lower()
    assert stream.finish_reason in {"stop", "length"}


def test_the_default_model_calls_an_offered_tool_in_the_hermes_format(qwen):
    question = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    assert qwen.count_tokens(question, [WEATHER]) > qwen.count_tokens(question) + 20  # the tool is in the prompt
    text = "".join(qwen.generate_stream(question, 48, 0.0, tools=[WEATHER]))
    assert CALL_OPEN in text and "get_weather" in text and "Paris" in text, text


def test_a_named_function_is_called_with_arguments_of_its_schema(qwen):
    stream = qwen.generate_stream(
        BOOKING, 64, 0.8, tools=[WEATHER, BOOK_TABLE], tool_choice=ToolChoice("function", "book_table")
    )
    text = "".join(stream)
    [call] = calls(text)
    assert call.name == "book_table" and stream.finish_reason == "stop", text
    arguments = json.loads(call.arguments)
    jsonschema.validate(arguments, BOOK_TABLE.parameters)
    assert arguments["name"] == "Lee" and arguments["party_size"] == 4


def test_required_makes_one_call_of_an_offered_function_on_a_model_whose_template_has_no_tools(smol):
    text = "".join(
        smol.generate_stream(BOOKING, 64, 0.8, seed=1, tools=[WEATHER, BOOK_TABLE], tool_choice=ToolChoice("required"))
    )
    [call] = calls(text)
    tool = {"get_weather": WEATHER, "book_table": BOOK_TABLE}[call.name]
    assert set(json.loads(call.arguments)) >= set(tool.parameters["required"]), text


def test_a_schema_llama_cpp_cannot_express_is_held_to_a_call_that_parses(smol):
    nested_ref = FunctionTool(
        "note",
        "Take a note.",
        {
            "type": "object",
            "$defs": {"text": {"type": "string"}},
            "properties": {"text": {"$ref": "#/$defs/text"}},
            "required": ["text"],
        },
    )
    text = "".join(
        smol.generate_stream(BOOKING, 64, 0.0, tools=[nested_ref, WEATHER], tool_choice=ToolChoice("required"))
    )
    [call] = calls(text)
    assert call.name in {"note", "get_weather"} and isinstance(json.loads(call.arguments), dict), text


def test_a_forced_call_cut_by_the_token_limit_stays_unfinished(smol):
    stream = smol.generate_stream(BOOKING, 3, 0.0, tools=[BOOK_TABLE], tool_choice=ToolChoice("function", "book_table"))
    text = "".join(stream)
    assert stream.finish_reason == "length" and text.startswith(CALL_OPEN) and CALL_CLOSE not in text
    assert calls(text) == []


WEATHER_ASKED = [
    {"role": "system", "content": DEFAULT_INSTRUCTIONS},
    {"role": "user", "content": "What is the weather like in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "name": "get_weather",
        "content": json.dumps({"city": "Paris", "sky": "sunny", "temperature_c": 21}),
    },
]


def test_the_default_model_reads_a_result_back_in_words_instead_of_calling_again(qwen):
    stream = qwen.generate_stream(WEATHER_ASKED, 48, 0.0, tools=[WEATHER])
    text = "".join(stream)
    assert calls(text) == [] and CALL_OPEN not in text and "{" not in text, text
    assert "sunny" in text.lower() or "21" in text, text


def test_tool_choice_none_answers_in_words(qwen):
    question = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    text = "".join(qwen.generate_stream(question, 24, 0.0, tools=[WEATHER], tool_choice=ToolChoice("none")))
    assert text.strip() and calls(text) == [] and CALL_OPEN not in text and not text.lstrip().startswith("{"), text


class Scripted:
    """A finished stream of given pieces; ``closed`` once its reader stopped it."""

    finish_reason = "stop"
    output_tokens = 0

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.closed = False

    def __iter__(self):
        try:
            yield from self.pieces
        finally:
            self.closed = True


def never() -> Scripted:
    raise AssertionError("no second generation was needed")


PARIS_CALL = [CALL_OPEN, '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n', CALL_CLOSE]


def test_an_answer_that_opens_a_call_is_stopped_and_made_under_the_grammar_and_text_is_left_alone():
    openings = (
        ["{\n", '"name": "get_weather",\n"arguments": {"city": "Paris"'],
        [CALL_OPEN, "\n{"],
        ["```", "json\n{\n", ' "name":', ' "get_weather"'],
    )
    for opening in openings:
        free = Scripted(opening + ["}}\n never read"])
        [call] = calls("".join(AutoCallStream(free, set(), never, lambda: Scripted(PARIS_CALL))))
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
        assert free.closed
    assert (
        "".join(AutoCallStream(Scripted(["It is ", "{sunny} today."]), set(), never, never)) == "It is {sunny} today."
    )
    for pieces in (["```", "python\nprint(1)\n```"], ['{"status":', ' "booked"}'], ["(", "sunny)"]):
        free = Scripted(pieces)  # markup first: never a spoken answer, so it is made again in words
        assert "".join(AutoCallStream(free, set(), lambda: Scripted(["It is booked."]), never)) == "It is booked."
        assert free.closed


def test_the_calls_answered_are_those_since_the_users_last_message():
    london = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"London"}'}}
    earlier = [
        {"role": "user", "content": "And London?"},
        {"role": "assistant", "content": "", "tool_calls": [london]},
        {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "rain"},
    ]
    assert answered_calls(earlier + WEATHER_ASKED[1:]) == {call_key("get_weather", {"city": "Paris"})}
    assert answered_calls(WEATHER_ASKED[:2]) == set()
    assert call_key("f", '{"b": 1, "a": 2}') == call_key("f", {"a": 2, "b": 1})


def test_a_call_answered_already_is_made_again_as_words_and_a_new_call_goes_through():
    answered = {call_key("get_weather", {"city": "Paris"})}
    again = Scripted(['{"name": "get_weather", ', '"arguments": {"city":  "Paris"}}'])
    words = AutoCallStream(again, answered, lambda: Scripted(["It is sunny."]), lambda: Scripted(PARIS_CALL))
    assert "".join(words) == "It is sunny."
    lyon = [CALL_OPEN, '\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n', CALL_CLOSE]
    other = Scripted([CALL_OPEN, '\n{"name": "get_weather", "arguments": {"city": "Ly'])
    [call] = calls("".join(AutoCallStream(other, answered, never, lambda: Scripted(lyon))))
    assert json.loads(call.arguments) == {"city": "Lyon"}


def test_a_call_the_model_is_about_to_write_again_is_not_written_and_the_answer_comes_at_once():
    answered = {call_key("get_weather", {"city": "Paris"})}
    opened = Scripted([CALL_OPEN, "\n{"])
    words = AutoCallStream(opened, answered, lambda: Scripted(["It is sunny."]), never, repeats=lambda: True)
    assert "".join(words) == "It is sunny." and opened.closed
    lyon = [CALL_OPEN, '\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n', CALL_CLOSE]
    new = AutoCallStream(Scripted([CALL_OPEN]), answered, never, lambda: Scripted(lyon), repeats=lambda: False)
    [call] = calls("".join(new))
    assert json.loads(call.arguments) == {"city": "Lyon"}
    # Before any call is answered the check is not asked for.
    first = AutoCallStream(Scripted([CALL_OPEN]), set(), never, lambda: Scripted(PARIS_CALL), repeats=never)
    assert [c.name for c in calls("".join(first))] == ["get_weather"]


def test_an_answered_call_is_looked_for_as_a_template_shows_it_and_as_it_was_written():
    written = {"id": "c", "type": "function", "function": {"name": "note", "arguments": '{"z": 1, "a": "<b>"}'}}
    turn = [
        {"role": "user", "content": "Note it."},
        {"role": "assistant", "content": "", "tool_calls": [written]},
        {"role": "tool", "tool_call_id": "c", "name": "note", "content": "done"},
    ]
    assert answered_call_objects(turn) == [
        '{"name": "note", "arguments": {"a": "\\u003cb\\u003e", "z": 1}}',
        '{"name": "note", "arguments": {"z": 1, "a": "<b>"}}',
    ]
    assert answered_call_objects(WEATHER_ASKED) == ['{"name": "get_weather", "arguments": {"city": "Paris"}}']
    assert answered_call_objects(WEATHER_ASKED[:2]) == []


def test_the_one_evaluation_check_agrees_with_what_greedy_decoding_writes(qwen):
    """Real llama.cpp, the default model, after a result: the required call it would write (greedy, under
    the grammar) is seen as such by ``writes``, a call of another city is not."""
    required = "".join(
        qwen.generate_stream(WEATHER_ASKED, 48, 0.0, tools=[WEATHER], tool_choice=ToolChoice("required"))
    )
    [call] = calls(required)
    opened = qwen.encode_chat(WEATHER_ASKED, [WEATHER]) + qwen.tokens(CALL_OPEN + "\n")

    def writes(arguments: dict) -> bool:
        text = f'{{"name": "{call.name}", "arguments": {json.dumps(arguments)}}}'
        return LlamaCppStream(qwen.contexts, opened, 0, 0.0, None, None, None).writes([qwen.tokens(text)])

    assert writes(json.loads(call.arguments)), required
    assert not writes({"city": "Lyon"})


def test_after_a_result_the_default_model_answers_without_writing_the_call_again(qwen, caplog):
    with caplog.at_level(logging.INFO, logger="pipelines.backends._llama_tools"):
        text = "".join(qwen.generate_stream(WEATHER_ASKED, 48, 0.0, tools=[WEATHER]))
    assert calls(text) == [] and ("sunny" in text.lower() or "21" in text), text
    said = [record.getMessage() for record in caplog.records]
    # The model opened the call again; it was seen in one evaluation, not written and dropped.
    assert any("began a call already answered" in line for line in said), said
    assert not any("was written again" in line for line in said), said


def test_a_call_the_default_model_makes_by_choice_is_the_required_call_under_the_grammar(qwen):
    question = [{"role": "user", "content": "Please book a table for four at seven tonight, the name is Lee."}]
    tools = [WEATHER, BOOK_TABLE]
    chosen = "".join(qwen.generate_stream(question, 64, 0.0, tools=tools))
    required = "".join(qwen.generate_stream(question, 64, 0.0, tools=tools, tool_choice=ToolChoice("required")))
    [call] = calls(chosen)
    assert chosen == required and call.name == "book_table", chosen
    jsonschema.validate(json.loads(call.arguments), BOOK_TABLE.parameters)


def test_it_streams_an_answer_and_counts_tokens(smol):
    stream = smol.generate_stream(QUESTION, max_new_tokens=40, temperature=0.0)
    pieces = list(stream)
    assert pieces and all(isinstance(p, str) and p for p in pieces)
    text = "".join(pieces)
    assert "France" in text  # SmolLM2-135M knows the question, not always the answer (the default model test asks it)
    assert "<|im_end|>" not in text and "<|im_start|>" not in text
    assert stream.input_tokens == smol.count_tokens(QUESTION)
    assert 0 < stream.output_tokens <= 40
    assert stream.finish_reason in {"stop", "length"}


def test_max_new_tokens_bounds_the_answer(smol):
    stream = smol.generate_stream(STORY, max_new_tokens=5, temperature=0.8, seed=1)
    list(stream)
    assert stream.output_tokens == 5
    assert stream.finish_reason == "length"


def test_a_seed_repeats_a_sampled_answer(smol):
    first = "".join(smol.generate_stream(STORY, 12, 0.8, seed=3))
    assert "".join(smol.generate_stream(STORY, 12, 0.8, seed=3)) == first


def test_cancel_stops_within_one_token(smol):
    cancel = threading.Event()
    stream = smol.generate_stream(STORY, max_new_tokens=200, temperature=0.8, cancel=cancel, seed=2)
    for _ in stream:
        cancel.set()
    assert stream.finish_reason == "cancelled"
    assert stream.output_tokens <= 3  # a piece may wait for a multi-byte character


def test_cancel_before_start_generates_nothing(smol):
    cancel = threading.Event()
    cancel.set()
    stream = smol.generate_stream(STORY, max_new_tokens=50, cancel=cancel)
    assert list(stream) == []
    assert stream.output_tokens == 0


def test_two_threads_generate_independently_on_one_model(smol):
    prompts = [QUESTION, [{"role": "user", "content": "Name three colors."}]]
    expected = ["".join(smol.generate_stream(p, 30, 0.0)) for p in prompts]
    results: dict[int, str] = {}

    def work(i: int) -> None:
        results[i] = "".join(smol.generate_stream(prompts[i], 30, 0.0))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [results[0], results[1]] == expected
    assert smol.contexts._made <= smol.contexts.max_contexts


def test_a_prompt_longer_than_the_context_is_refused(smol):
    long = [{"role": "user", "content": "word " * (smol.context_length + 10)}]
    with pytest.raises(PromptTooLongError):
        smol.generate_stream(long, max_new_tokens=10)


def test_a_prefix_reuses_the_previous_turn_and_gives_the_same_answer(smol):
    """The same answer in substance, not token for token: the reused cache of the first answer's words was
    computed a token at a time as they were generated, the plain prompt's in one batch, and llama.cpp's
    kernels round the two differently on some CPUs (on an AVX2 machine the greedy answers part at their
    second token: "La Roma, ..." against "La Italy, ..."; both go on to name Rome)."""
    prefix = smol.new_prefix_cache()
    history = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    first = "".join(smol.generate_stream(history, 16, 0.0, prefix=prefix))
    history += [{"role": "assistant", "content": first.strip()}, {"role": "user", "content": "And of Italy?"}]
    plain = "".join(smol.generate_stream(history, 16, 0.0))
    cached_stream = smol.generate_stream(history, 16, 0.0, prefix=prefix)
    cached = "".join(cached_stream)
    assert "Rome" in plain and "Rome" in cached, (plain, cached)
    assert cached.split()[0] == plain.split()[0]
    assert cached_stream.cached_tokens > cached_stream.input_tokens // 2


def test_two_conversations_taking_turns_keep_their_own_caches():
    """Two sessions answered in turn on a model of two contexts: each turn of each reads only its new words.
    The context a conversation left is not given to the other while a spare exists or can be made (one is
    made ahead, off the caller's thread); before, the second took the first's and each turn read its whole
    history again."""
    folder, name = default_model()
    lm = LlamaCppLM(str(Path(folder) / name), threads=2, max_contexts=2, n_ctx=1024)
    conversations = [
        (lm.new_prefix_cache(), [{"role": "user", "content": f"Tell me about {animal}."}])
        for animal in ("cats", "owls")
    ]
    for turn in range(3):
        for prefix, history in conversations:
            stream = lm.generate_stream(history, 8, 0.0, prefix=prefix)
            answer = "".join(stream)
            if turn:
                assert stream.cached_tokens > stream.input_tokens // 2, (
                    turn,
                    stream.cached_tokens,
                    stream.input_tokens,
                )
            history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    assert conversations[0][0].context is not conversations[1][0].context
    assert lm.contexts._made == 2


def test_a_conversation_arriving_while_the_spare_is_made_waits_for_it_rather_than_take_anothers_cache():
    """CI's failure: the first conversation took the context made at load, the spare made ahead was not ready
    when the second came (a loaded machine), and the second took the first's context: the first's next turn read
    only the instructions both share (27 of 57 tokens). Here the spare is held back until the second is seen
    waiting for it."""
    folder, name = default_model()
    lm = LlamaCppLM(str(Path(folder) / name), threads=2, max_contexts=2, n_ctx=1024)
    gate = threading.Event()
    make = lm.contexts._make_context

    def held_back():
        assert gate.wait(30)
        return make()

    lm.contexts._make_context = held_back
    cats = (lm.new_prefix_cache(), [{"role": "user", "content": "Tell me about cats."}])
    owls = (lm.new_prefix_cache(), [{"role": "user", "content": "Tell me about owls."}])
    first = "".join(lm.generate_stream(cats[1], 8, 0.0, prefix=cats[0]))
    assert lm.contexts._making == 1
    second: list[str] = []
    waiting = threading.Thread(
        target=lambda: second.append("".join(lm.generate_stream(owls[1], 8, 0.0, prefix=owls[0])))
    )
    waiting.start()
    waiting.join(1.0)
    assert waiting.is_alive() and not second, "the second conversation took the first's context"
    gate.set()
    waiting.join(30)
    assert second and cats[0].context is not owls[0].context
    for (prefix, history), answer in ((cats, first), (owls, second[0])):
        earlier = lm.count_tokens(history)
        history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
        stream = lm.generate_stream(history, 8, 0.0, prefix=prefix)
        "".join(stream)
        assert stream.cached_tokens >= earlier, (stream.cached_tokens, earlier)


def test_a_conversation_whose_context_was_taken_does_not_take_it_back_from_the_taker():
    """Three conversations on two contexts: the third takes the context released the longest ago (the first's);
    when the first comes back it takes the one released the longest ago now (the second's), not its old one,
    which holds the third's cache."""
    folder, name = default_model()
    lm = LlamaCppLM(str(Path(folder) / name), threads=2, max_contexts=2, n_ctx=1024)
    conversations = {
        animal: (lm.new_prefix_cache(), [{"role": "user", "content": f"Tell me about {animal}."}])
        for animal in ("cats", "owls", "hens")
    }

    def turn(animal):
        prefix, history = conversations[animal]
        stream = lm.generate_stream(history, 8, 0.0, prefix=prefix)
        history += [{"role": "assistant", "content": "".join(stream)}, {"role": "user", "content": "And then?"}]
        return stream

    for animal in ("cats", "owls"):
        turn(animal)
        deadline = time.monotonic() + 30
        while lm.contexts._making and time.monotonic() < deadline:  # the spare made ahead, so that owls gets its own
            time.sleep(0.05)
    assert conversations["cats"][0].context is not conversations["owls"][0].context
    hens_context = turn("hens") and conversations["hens"][0].context
    assert hens_context is not conversations["owls"][0].context  # it took the cats' context
    turn("cats")
    assert conversations["hens"][0].context is hens_context
    earlier = lm.count_tokens(conversations["hens"][1][:-2])
    stream = turn("hens")
    assert stream.cached_tokens >= earlier, (stream.cached_tokens, earlier)


def test_a_prefix_recovers_from_a_prompt_that_diverges(smol):
    prefix = smol.new_prefix_cache()
    base = [{"role": "system", "content": "Answer briefly."}]
    "".join(smol.generate_stream(base + [{"role": "user", "content": "Tell me about cats."}], 12, 0.0, prefix=prefix))
    other = base + [{"role": "user", "content": "What is two plus two?"}]
    diverged = smol.generate_stream(other, 12, 0.0, prefix=prefix)
    assert "".join(diverged) == "".join(smol.generate_stream(other, 12, 0.0))
    assert 0 < diverged.cached_tokens < smol.count_tokens(other)


def test_a_folder_with_one_gguf_or_a_named_file_resolves(tmp_path):
    folder, name = default_model()
    assert resolve_gguf(folder, name) == str(Path(folder) / name)
    assert resolve_gguf(folder) == str(Path(folder) / name)
    with pytest.raises(FileNotFoundError):
        resolve_gguf(str(tmp_path))


def test_parts_that_do_not_match_the_model_are_refused(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "a").write_bytes(b"abc")
    (pkg / "data" / "b").write_bytes(b"def")
    spec = _assembled.ChunkedModel(
        "joined.bin",
        (_assembled.Part("fake_pkg", "data/a"), _assembled.Part("fake_pkg", "data/b")),
        size=6,
        sha256="0" * 64,
    )
    monkeypatch.setitem(_assembled.MODELS, "fake", spec)
    monkeypatch.setattr(_assembled, "package_dir", lambda _name: pkg)
    with pytest.raises(ValueError, match="do not match"):
        _assembled.assembled("fake", tmp_path / "cache")
    assert not (tmp_path / "cache" / "fake").exists()
    right = dataclasses.replace(spec, sha256=hashlib.sha256(b"abcdef").hexdigest())
    monkeypatch.setitem(_assembled.MODELS, "fake", right)
    folder = _assembled.assembled("fake", tmp_path / "cache")
    assert (folder / "joined.bin").read_bytes() == b"abcdef"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["fake"]  # no temp folder left


def test_every_wrapping_of_a_bare_call_opens_a_call_and_words_do_not():
    for opening in ("<tool_call>", '({"name"', '{{"name":', '```json{"name"', '```{"name"', '[{"name"'):
        assert _opening(opening) == (True, True), opening
    for undecided in ("", "<tool", "(", "{", "{{", '{"na', "```js"):
        assert _opening(undecided) == (False, True), undecided
    for words in ("Hello", "(I", '{"city"', "It{", "```python"):
        assert _opening(words) == (False, False), words


def test_a_template_that_shows_the_call_with_doubled_braces_is_given_the_single_braced_layout():
    doubled = "x <tool_call>\\n" + DOUBLED_CALL_LAYOUT + "\\n</tool_call> y"
    assert (
        fixed_template(doubled)
        == 'x <tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call> y'
    )
    assert fixed_template("{{ messages }}") == "{{ messages }}"


def test_calls_in_parallel_follow_one_another_until_the_model_ends_and_answered_ones_are_dropped():
    lyon = [CALL_OPEN, '\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n', CALL_CLOSE]
    seen: list[str] = []

    def next_call(written: str):
        seen.append(written)
        return Scripted(lyon) if len(seen) == 1 else None

    both = "".join(CallSequence(Scripted(PARIS_CALL), next_call))
    assert [json.loads(c.arguments)["city"] for c in calls(both)] == ["Paris", "Lyon"]
    assert seen[0] == "".join(PARIS_CALL)
    answered = {call_key("get_weather", {"city": "Paris"})}
    new_only = AutoCallStream(Scripted(["<tool_call>"]), answered, never, lambda: Scripted(PARIS_CALL + ["\n"] + lyon))
    assert [json.loads(c.arguments)["city"] for c in calls("".join(new_only))] == ["Lyon"]


def test_the_current_turn_is_the_instructions_and_all_since_the_users_last_message():
    earlier = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."}]
    assert current_turn([{"role": "system", "content": "Be brief."}] + earlier + WEATHER_ASKED) == [
        {"role": "system", "content": "Be brief."},
        *WEATHER_ASKED,
    ]
    assert current_turn(WEATHER_ASKED) == WEATHER_ASKED


def test_with_earlier_turns_the_decision_sees_the_turn_and_an_answer_in_words_comes_from_the_conversation():
    turn_text = Scripted(["Sure"])  # the decision's own words are not the answer
    answer = "".join(AutoCallStream(turn_text, set(), never, never, answer=lambda: Scripted(["It is sunny."])))
    assert answer == "It is sunny." and turn_text.closed
    [call] = calls(
        "".join(AutoCallStream(Scripted(["<tool_call>"]), set(), never, lambda: Scripted(PARIS_CALL), answer=never))
    )
    assert call.name == "get_weather"


def test_the_default_model_calls_a_tool_in_a_later_turn_after_an_earlier_call_and_answer(qwen):
    earlier = [
        {"role": "system", "content": DEFAULT_INSTRUCTIONS},
        *WEATHER_ASKED[1:],
        {"role": "assistant", "content": "It is sunny and twenty-one degrees in Paris."},
    ]
    booking = earlier + [{"role": "user", "content": "Book a table for four at seven tonight, the name is Lee."}]
    prefix = qwen.new_prefix_cache()
    [call] = calls("".join(qwen.generate_stream(booking, 64, 0.0, prefix=prefix, tools=[WEATHER, BOOK_TABLE])))
    assert call.name == "book_table" and json.loads(call.arguments)["party_size"] == 4, call
    chat = earlier + [{"role": "user", "content": "Thank you, that was helpful."}]
    text = "".join(qwen.generate_stream(chat, 32, 0.0, prefix=prefix, tools=[WEATHER, BOOK_TABLE]))
    assert text.strip() and not calls(text) and text.strip()[0] not in "<{[(`", text


def test_after_a_result_in_a_later_turn_the_answer_comes_from_the_turns_own_context(monkeypatch):
    """Real llama.cpp, the default model: an earlier turn, then a call and its result; the decision and the
    answer both read the turn's context, so the answer reads little more than the note before it. Once the
    answer is given, reading ahead puts it in the conversation's context, and the next turn's answer reads
    little more than its question."""
    earlier = [
        {"role": "system", "content": DEFAULT_INSTRUCTIONS},
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
    ]
    conversation = earlier + WEATHER_ASKED[1:]
    qwen = LlamaCppLM(threads=2, n_ctx=1024, max_contexts=2)  # as a server's unit has: two contexts
    prefix = qwen.new_prefix_cache()
    qwen.prefill(conversation, [WEATHER], prefix)
    stream = qwen.generate_stream(conversation, 48, 0.0, prefix=prefix, tools=[WEATHER])
    text = "".join(stream)
    assert calls(text) == [] and ("sunny" in text.lower() or "21" in text), text
    assert stream.input_tokens - stream.cached_tokens < 40  # the note and the answer's header, not the turn
    assert prefix.context is not None and prefix.turn is not None and prefix.turn.context is not None

    # The answer came from the turn's context; the conversation's reads it once it is given (LmStage reads
    # ahead after a response), and leaves the turn's context alone: the next turn is not said yet.
    answered = conversation + [{"role": "assistant", "content": text}]
    read_into = []
    monkeypatch.setattr(qwen, "_read", lambda *args, read=qwen._read: read_into.append(args[2]) or read(*args))
    assert qwen.prefill(answered, [WEATHER], prefix) > 0
    assert read_into == [prefix]
    asked = answered + [{"role": "user", "content": "Thank you. What should I wear, then?"}]
    stream = qwen.generate_stream(asked, 24, 0.0, prefix=prefix, tools=[WEATHER])
    reply = "".join(stream)
    assert reply.strip() and calls(reply) == [], reply
    assert stream.input_tokens - stream.cached_tokens < 30  # the question and the answer's header


def test_a_chosen_call_must_be_made_of_what_was_said_or_the_answer_is_given_in_words():
    said = [
        {"role": "system", "content": "The user's name is Lee."},
        {"role": "user", "content": "Hello, how are you?"},
    ]
    grounded = Grounding([WEATHER, BOOK_TABLE], said)
    assert not grounded(CallEnd("get_weather", '{"city": "New York"}'))
    assert grounded(CallEnd("book_table", '{"name": "Lee", "party_size": 2, "time": "19:00"}'))
    assert Grounding([WEATHER], [{"role": "user", "content": "Is it raining in London?"}])(
        CallEnd("get_weather", '{"city": "london"}')
    )
    shopping = FunctionTool("add", "Add to the list.", {"type": "object", "properties": {"item": {"type": "string"}}})
    assert Grounding([shopping], [{"role": "user", "content": "Put six eggs on the list."}])(
        CallEnd("add", '{"item": "egg"}')
    )
    made_up = Scripted(['<tool_call>\n{"name": "get_weather", "arguments": {"city": "New York"}}\n</tool_call>'])
    words = AutoCallStream(
        Scripted(["<tool_call>"]),
        set(),
        lambda: Scripted(["I am well, thank you."]),
        lambda: made_up,
        grounded=grounded,
    )
    assert "".join(words) == "I am well, thank you."


def test_with_a_model_for_answers_the_decision_and_calls_stay_on_the_first_and_words_come_from_the_second():
    """Real llama.cpp: Qwen2.5-Coder-0.5B decides and writes calls, SmolLM2-135M (standing in for a larger
    model) answers in words; each on its own contexts of the one conversation (``ConversationCache``)."""
    folder, name = default_model()
    engine = LlamaCppLM(threads=2, n_ctx=1024, max_contexts=2, answer_model=str(Path(folder) / name))
    assert engine.answerer is not None and engine.answerer.model_path.endswith(name)
    plain = engine.new_prefix_cache()
    assert "".join(engine.generate_stream(QUESTION, 16, 0.0, prefix=plain)).strip()
    assert plain.context is None and plain.answer is not None and plain.answer.context is not None

    asked = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    called = engine.new_prefix_cache()
    [call] = calls("".join(engine.generate_stream(asked, 48, 0.0, prefix=called, tools=[WEATHER])))
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert called.context is not None and called.answer is None  # the answer model was not asked

    after = engine.new_prefix_cache()
    engine.prefill(WEATHER_ASKED, [WEATHER], after)  # the decision's prompt here, the answer's there
    answer = "".join(engine.generate_stream(WEATHER_ASKED, 32, 0.0, prefix=after, tools=[WEATHER]))
    assert calls(answer) == [] and CALL_OPEN not in answer and answer.strip(), answer
    assert after.context is not None and after.answer is not None and after.answer.context is not None


def test_greedy_decoding_under_a_grammar_writes_what_the_full_weighing_writes_in_fewer_evaluations(qwen):
    """Real llama.cpp, the default model: ``GreedyUnderGrammar`` (the grammar asked of the most likely token,
    every token weighed only when it refuses, the text the grammar forces written ahead) writes what
    llama-cpp-python's sampler chain writes, weighing every token each step and decoding every token: the same
    call (where the model put a space the grammar allows, as before a closing brace, it may not), a named
    call's arguments, and the same text under a grammar that refuses the model's first choices (digits for a
    question). The forced text (``{"name": "``, the rest of a name, the keys) costs no evaluation of its own."""
    from llama_cpp import LlamaGrammar

    from pipelines.backends._llama_stream import GreedyUnderGrammar
    from pipelines.backends._llama_tools import forced_call

    call = forced_call([WEATHER, BOOK_TABLE], ToolChoice("required"))
    named = forced_call([WEATHER, BOOK_TABLE], ToolChoice("function", "book_table"))
    asked = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    cases = [
        (qwen.encode_chat(BOOKING, [WEATHER, BOOK_TABLE]) + qwen.tokens(call.head), call.grammar),
        (qwen.encode_chat(BOOKING, [WEATHER, BOOK_TABLE]) + qwen.tokens(named.head), named.grammar),
        (qwen.encode_chat(asked, [WEATHER, BOOK_TABLE]) + qwen.tokens(call.head), call.grammar),
        (qwen.encode_chat(QUESTION), 'root ::= [0-9] [0-9] [0-9] " " [a-z]+'),
    ]
    (context,) = [qwen.contexts.acquire(None)]
    try:
        for prompt, grammar in cases:
            context.reset()
            full = context.generate(
                prompt, temp=0.0, top_k=1, repeat_penalty=1.0, grammar=LlamaGrammar.from_string(grammar)
            )
            expected = until_end(context, full)
            full.close()
            context.reset()
            quick = GreedyUnderGrammar(context, prompt, grammar)
            written = until_end(context, quick)
            quick.close()
            text, weighed = context.detokenize(written).decode(), context.detokenize(expected).decode()
            if grammar == cases[-1][1]:
                assert text == weighed
            else:  # the call's object (or its arguments), whole; spaces between the JSON's parts may differ
                assert json.loads(text) == json.loads(weighed), (text, weighed)
                assert quick.evaluations <= len(written) // 2, (quick.evaluations, len(written), text)
    finally:
        qwen.contexts.release(context, None)


def until_end(context, tokens, limit: int = 48) -> list[int]:
    """``tokens`` up to an end-of-generation token, at most ``limit``."""
    import llama_cpp

    ends = functools.partial(llama_cpp.llama_vocab_is_eog, vocab(context))
    return list(itertools.islice(itertools.takewhile(lambda token: not ends(token), tokens), limit))


def test_text_is_written_ahead_only_at_the_edges_of_words():
    """``_whole_words``: a run the grammar forces is written ahead whole where it starts and ends between words;
    the start of a word at its end (with a "_" joined to its front) and a run that goes on with the model's word
    are left for the model to write."""
    from pipelines.backends._llama_stream import _whole_words

    assert _whole_words(b'{"name": "', b"\n") == b'{"name": "'
    assert _whole_words(b'_weather", "arguments": {"city": "', b"t") == b'_weather", "arguments": {"city": "'
    assert _whole_words(b"_", b"t") == b""
    assert _whole_words(b'", "arguments": {"party_', b"e") == b'", "arguments": {"party'
    assert _whole_words(b'ok_table", "', b"o") == b""
    assert _whole_words(b'", "party_size": ', b'"') == b'", "party_size": '
