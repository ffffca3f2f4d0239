"""Cutting a stream of generated text into pieces worth speaking."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+|\n+")
_CLAUSE_END = re.compile(r"[,;:]\s+")
_WORD_END = re.compile(r"\s+")


class SentenceSplitter:
    """Feeds on generated text; gives back pieces to speak as soon as they are complete.

    Sentences go out whole. A long clause (``clause_chars`` before a comma) goes
    out early. The first piece of a response goes out at its first clause or
    after ``first_words`` words, whichever comes first: the listener hears the
    answer start while the model is still writing the rest of the sentence.
    """

    def __init__(self, clause_chars: int = 60, first_words: int = 4) -> None:
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
            gaps = list(_WORD_END.finditer(self._buffer.lstrip()))
            if len(gaps) >= self._first_words:
                return gaps[self._first_words - 1].end() + len(self._buffer) - len(self._buffer.lstrip())
        return None

    def flush(self) -> str:
        rest, self._buffer = self._buffer.strip(), ""
        return rest
