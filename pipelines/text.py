"""Cutting a stream of generated text into pieces worth speaking."""

from __future__ import annotations

import re

from pipelines.config import ENGINE_DEFAULTS

_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+|\n+")
# A comma after a digit ends a clause only once a word follows: "2, 600,000" (a small model's stray space in
# a number) must not be cut into two pieces, which the transcript would join with a space.
_CLAUSE_END = re.compile(r"(?<!\d)[,;:]\s+|(?<=\d)[,;:]\s+(?=[^\d\s])")
_WORD_END = re.compile(r"\s+")
_IN_NUMBER = re.compile(r"\d[,.]$")


class SentenceSplitter:
    """Feeds on generated text; gives back pieces to speak as soon as they are complete.

    Sentences go out whole. A long clause (``clause_chars`` before a comma) goes
    out early. The first piece of a response goes out at its first clause or
    after ``first_words`` words, whichever comes first: the listener hears the
    answer start while the model is still writing the rest of the sentence.
    """

    def __init__(self, clause_chars: int = 60, first_words: int = ENGINE_DEFAULTS.first_piece_words) -> None:
        self._buffer = ""
        self._clause_chars = clause_chars
        self._first_words = first_words
        self._first = True

    def feed(self, text: str) -> list[str]:
        self._buffer += text
        out: list[str] = []
        while True:
            end = self._cut()
            if end is None:
                break
            piece, self._buffer = self._buffer[:end], self._buffer[end:]
            if piece.strip():
                out.append(piece.strip())
                self._first = False
        return out

    def _cut(self) -> int | None:
        match = _SENTENCE_END.search(self._buffer)
        if match is not None:
            return match.end()
        for clause in _CLAUSE_END.finditer(self._buffer):
            if self._first or clause.end() >= self._clause_chars:
                return clause.end()
        if self._first and self._first_words:
            text = self._buffer.lstrip()
            for gap in list(_WORD_END.finditer(text))[self._first_words - 1 :]:
                if not _IN_NUMBER.search(text, 0, gap.start()):  # never between "2," and "600,000"
                    return gap.end() + len(self._buffer) - len(text)
        return None

    def flush(self) -> str:
        rest, self._buffer = self._buffer.strip(), ""
        return rest
