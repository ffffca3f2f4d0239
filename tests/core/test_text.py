"""How generated text is cut into pieces for TTS (pipelines/text.py)."""

from __future__ import annotations

from pipelines.text import SentenceSplitter


def fed(splitter: SentenceSplitter, tokens: list[str]) -> list[list[str]]:
    """What comes out after each token, as the LM stage feeds it."""
    return [splitter.feed(token) for token in tokens]


def test_the_first_piece_goes_out_after_n_words_once_the_next_word_begins():
    out = fed(SentenceSplitter(first_words=3), ["The", " capital", " of", " France", " is", " Paris", "."])
    assert out[:3] == [[], [], []]
    assert out[3] == ["The capital of"]
    assert out[4:] == [[], [], []]


def test_later_pieces_are_whole_sentences_and_the_rest_comes_with_flush():
    splitter = SentenceSplitter(first_words=2)
    out = fed(splitter, ["Hi", " there", " friend.", " How", " are", " you", " today?", " Fine"])
    assert [piece for pieces in out for piece in pieces] == ["Hi there", "friend.", "How are you today?"]
    assert splitter.flush() == "Fine"


def test_a_first_clause_goes_out_before_the_word_count():
    out = fed(SentenceSplitter(first_words=6), ["Yes,", " it", " is", " true", " indeed", "."])
    assert out[1] == ["Yes,"]


def test_with_no_word_count_the_first_piece_waits_for_a_clause_or_sentence():
    out = fed(SentenceSplitter(first_words=0), ["One", " two", " three", " four", " five", ".", " Six"])
    assert [piece for pieces in out for piece in pieces] == ["One two three four five."]


def test_a_long_clause_goes_out_at_its_comma_a_short_one_waits_for_the_sentence():
    splitter = SentenceSplitter(clause_chars=20, first_words=0)
    assert splitter.feed("Done. ") == ["Done."]
    assert splitter.feed("Short, ") == []
    assert splitter.feed("then a much longer clause, ") == ["Short, then a much longer clause,"]
