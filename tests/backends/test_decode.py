"""The decode loop the LM engines share: the text each token adds, whole characters only."""

from __future__ import annotations

from pipelines.backends._decode import text_pieces

# Tokens as byte pieces, as a byte-level tokenizer has them: "é" (two bytes) and "👋" (four) split across tokens.
PIECES = {1: b"Caf", 2: b"\xc3", 3: b"\xa9 ", 4: b"\xf0\x9f", 5: b"\x91", 6: b"\x8b!"}


def decode(ids: list[int]) -> str:
    return b"".join(PIECES[i] for i in ids).decode("utf-8", errors="replace")


def test_a_character_split_across_tokens_comes_whole_once_its_last_byte_is_in():
    assert list(text_pieces([1, 2, 3, 4, 5, 6], decode)) == ["Caf", "é ", "👋!"]


def test_the_pieces_join_to_the_whole_decoded_text():
    assert "".join(text_pieces([1, 2, 3, 4, 5, 6], decode)) == decode([1, 2, 3, 4, 5, 6])


def test_a_token_that_adds_no_text_yields_nothing():
    assert list(text_pieces([1, 7, 1], lambda ids: decode([i for i in ids if i != 7]))) == ["Caf", "Caf"]
