"""The words' end-of-turn check on the packaged SmolLM2-135M-Instruct: finished messages against fragments."""

from __future__ import annotations

import threading

import pytest

from pipelines.backends.turn_text import FRAMING, EndOfTurnLM, cached_prefix, words_of
from pipelines.stages.vad import SEMANTIC_TEXT_FLOOR

pytestmark = pytest.mark.real_models

FLOOR = SEMANTIC_TEXT_FLOOR["auto"]


@pytest.fixture(scope="module")
def reader() -> EndOfTurnLM:
    return EndOfTurnLM()


def test_whisper_s_final_punctuation_is_not_the_speaker_s():
    assert words_of("I think the answer is... ") == "I think the answer is"
    assert words_of("Could you book a table for?") == "Could you book a table for"
    assert words_of("  ") == ""


@pytest.mark.parametrize(
    "text",
    [
        "What is the capital of France?",
        "How are you today?",
        "Is it going to rain this weekend?",
        "What's the weather like tomorrow?",
    ],
)
def test_a_finished_message_reads_as_finished(reader, text):
    assert reader.finished_probability(text) >= FLOOR, text


@pytest.mark.parametrize(
    "text",
    [
        "I'd like to order a",
        "Could you book a table for?",
        "Please remind me to call.",
        "I want to fly from London to...",
        "The meeting is on.",
        "So what I need from you is...",
    ],
)
def test_a_sentence_cut_in_the_middle_reads_as_unfinished_whatever_whisper_s_punctuation(reader, text):
    assert reader.finished_probability(text) < FLOOR, text


def test_the_last_word_is_whole_so_what_would_go_on_with_it_does_not_count(reader):
    # SmolLM2 puts 0.8 on "te" after "Juliet" ("Juliette"): the speaker ended the word there.
    assert reader.finished_probability("Who wrote Romeo and Juliet") >= FLOOR
    assert reader.finished_probability("Could you book a table for") < FLOOR  # " me", " a": words that go on


def test_a_transcript_that_trails_off_reads_as_unfinished(reader):
    assert reader.finished_probability("I'd like to cancel my...") == 0.0
    assert reader.finished_probability("Could you send a message to-") == 0.0
    assert reader.finished_probability("What is the capital of France?") >= FLOOR


def test_no_words_leave_the_verdict_to_the_sound(reader):
    assert reader.finished_probability("") == 1.0
    assert reader.finished_probability("...") == 1.0


def test_units_may_ask_at_once(reader):
    texts = ["What is the capital of France?", "I'd like to order a"] * 3
    results: dict[int, float] = {}

    def ask(index: int) -> None:
        results[index] = reader.finished_probability(texts[index])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    alone = {text: reader.finished_probability(text) for text in set(texts)}
    assert all(results[i] == pytest.approx(alone[texts[i]], abs=1e-5) for i in range(len(texts)))


def test_a_reading_is_the_same_whatever_the_context_read_before(reader):
    """The context keeps the cache of what it read last; what it keeps must not change a verdict."""
    first = {text: reader.finished_probability(text) for text in ("I'd like to order a", "What is the capital of")}
    for before in ("I'd like to order a large pizza", "What is the capital of France", "Why is the sky blue", "Hi"):
        for text, alone in first.items():
            reader.finished_probability(before)
            assert reader.finished_probability(text) == pytest.approx(alone, rel=1e-4, abs=1e-7), (before, text)
    assert reader.finished_probability("Hi") == pytest.approx(reader.finished_probability("Hi"), rel=1e-4)


def test_the_next_reading_evaluates_only_what_differs_from_the_last(reader):
    reader.finished_probability("What is the capital of France")
    context = reader._free[-1]  # the context that read last
    tokens = context.tokenize((FRAMING + "Why is the sky blue").encode(), add_bos=False, special=False)
    framing = context.tokenize(FRAMING.rstrip('"').encode(), add_bos=False, special=False)
    # The framing is kept: the words are what is left to evaluate.
    assert len(framing) <= cached_prefix(context, tokens) < len(tokens) - 3


@pytest.mark.parametrize(
    "text",
    ["Name a fruit that is yellow.", "What color is the sky", "Play some music", "Turn the lights off."],
)
def test_a_short_complete_request_without_a_question_mark_reads_as_finished(reader, text):
    # Read as an open chat message (the first reader), such requests read about as low as cut sentences
    # ("Name a fruit that is yellow" 0.09 against a floor of 0.1 then): their turns waited 2 s for more speech.
    assert reader.finished_probability(text) >= FLOOR, text
