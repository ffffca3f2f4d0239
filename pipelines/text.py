"""Cutting a stream of generated text into pieces worth speaking."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+|\n+")
_CLAUSE_END = re.compile(r"[,;:]\s+")


class SentenceSplitter:
    """Feeds on generated text; gives back sentences as soon as they are complete.

    A long clause (``clause_chars`` or more before a comma) is let out early, so
    that speech starts before a long sentence is finished.
    """

    def __init__(self, clause_chars: int = 60) -> None:
        self._buffer = ""
        self._clause_chars = clause_chars

    def feed(self, text: str) -> list[str]:
        self._buffer += text
        out: list[str] = []
        while True:
            match = _SENTENCE_END.search(self._buffer)
            if match is None:
                clause = _CLAUSE_END.search(self._buffer)
                if clause is None or clause.end() < self._clause_chars:
                    break
                match = clause
            piece, self._buffer = self._buffer[: match.end()], self._buffer[match.end():]
            if piece.strip():
                out.append(piece.strip())
        return out

    def flush(self) -> str:
        rest, self._buffer = self._buffer.strip(), ""
        return rest
