"""Speech to text: the user's turns become transcripts for the client and the LM."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from pipelines.messages import (
    Downstream,
    Message,
    PartialUtterance,
    TranscriptCompleted,
    TranscriptDelta,
    UserWordsSoFar,
    TranscriptFailed,
    UserTurn,
    Utterance,
    WordLogprobs,
)
from pipelines.stages.base import SessionContext, Stage

logger = logging.getLogger(__name__)


class Transcriber(Protocol):
    def transcribe(self, audio: np.ndarray, language: str | None = None, prompt: str | None = None) -> str: ...

    def transcribe_words(
        self, audio: np.ndarray, language: str | None = None, prompt: str | None = None
    ) -> WordLogprobs:
        """The transcript's words (each with its leading space) and their natural-log probabilities."""


class SttStage(Stage):
    name = "stt"

    def __init__(self, context: SessionContext, transcriber: Transcriber) -> None:
        super().__init__(context)
        self.transcriber = transcriber
        self.on_session_end()

    def on_session_end(self) -> None:
        self._partial_item = ""
        self._said: list[str] = []  # words already sent as deltas for _partial_item
        self._last: list[str] = []  # words of the latest partial transcript
        self._speculated: tuple[str, str] = ("", "")  # (item, turn) of the last speculative final

    def process(self, msg: Downstream) -> Iterator[Message]:
        if isinstance(msg, PartialUtterance):
            try:
                yield from self._partial(msg)
            finally:
                self.context.partial_pending.clear()
        elif isinstance(msg, Utterance):
            yield from self._final(msg)
        else:
            yield msg

    def _transcribe(self, samples: bytes) -> str:
        audio = np.frombuffer(samples, dtype=np.float32)
        settings = self.context.settings
        return self.transcriber.transcribe(
            audio, settings.transcription_language, settings.transcription_prompt
        ).strip()

    def _transcribe_final(self, samples: bytes) -> tuple[str, WordLogprobs | None]:
        """The final transcript, with its words' log probabilities when the session asked for them."""
        settings = self.context.settings
        if not settings.transcription_logprobs:
            return self._transcribe(samples), None
        audio = np.frombuffer(samples, dtype=np.float32)
        words = tuple(
            self.transcriber.transcribe_words(audio, settings.transcription_language, settings.transcription_prompt)
        )
        return "".join(word for word, _ in words).strip(), words

    def _partial(self, msg: PartialUtterance) -> Iterator[Message]:
        """Sends the words two partial transcripts agree on (never the newest one): deltas only append."""
        item, turn = self._speculated
        if item == msg.item_id and not self.context.turn_abandoned(turn):
            return  # the turn's final transcript is already out (or held): a late partial would follow it
        if msg.item_id != self._partial_item:
            self._partial_item, self._said, self._last = msg.item_id, [], []
        words = self._transcribe(msg.samples).split()
        if len(words) > 1:  # the newest word may be cut off mid-word: the LM reads ahead up to it
            yield UserWordsSoFar(generation=msg.generation, item_id=msg.item_id, text=" ".join(words[:-1]))
        stable = _common_prefix(self._last, words)
        self._last = words
        stable = min(stable, len(words) - 1)
        if stable > len(self._said) and _common_prefix(self._said, words) == len(self._said):
            new = words[len(self._said) : stable]
            yield TranscriptDelta(
                generation=msg.generation, item_id=msg.item_id, delta=(" " if self._said else "") + " ".join(new)
            )
            self._said = words[:stable]

    def _final(self, msg: Utterance) -> Iterator[Message]:
        """A finished turn, or a speculative one (``msg.turn``) whose output is held until confirmed."""
        started = time.perf_counter()
        try:
            text, logprobs = self._transcribe_final(msg.samples)
        except Exception as exc:
            logger.exception("transcription failed")
            if msg.turn:
                self.context.note_words(msg.turn, "")  # no words: the VAD's turn check goes by the audio
            yield TranscriptFailed(
                generation=msg.generation, item_id=msg.item_id, message=f"{type(exc).__name__}: {exc}", turn=msg.turn
            )
            return
        elapsed = time.perf_counter() - started
        if msg.timeline is not None:
            msg.timeline.mark("stt_end")
        said = self._said if msg.item_id == self._partial_item else []
        words = text.split()
        if len(words) > len(said) and _common_prefix(said, words) == len(said):
            delta = (" " if said else "") + " ".join(words[len(said) :])
            yield TranscriptDelta(
                generation=msg.generation,
                item_id=msg.item_id,
                delta=delta,
                turn=msg.turn,
                logprobs=_tail(logprobs, len(words) - len(said)),
            )
        if msg.turn:  # a speculative turn may yet be abandoned: then partials go on from here
            self._speculated = (msg.item_id, msg.turn)
            self.context.note_words(msg.turn, text)
        else:
            self._partial_item, self._said, self._last = "", [], []
        yield TranscriptCompleted(
            generation=msg.generation,
            item_id=msg.item_id,
            transcript=text,
            stt_s=elapsed,
            logprobs=logprobs,
            turn=msg.turn,
        )
        yield UserTurn(
            generation=msg.generation,
            item_id=msg.item_id,
            text=text,
            create_response=msg.create_response and bool(text),
            response=msg.response,
            turn=msg.turn,
            timeline=msg.timeline,
        )


def _tail(logprobs: WordLogprobs | None, count: int) -> WordLogprobs | None:
    """The log probabilities of the last ``count`` words (a delta's share of the transcript)."""
    if logprobs is None:
        return None
    return logprobs[len(logprobs) - count :] if count <= len(logprobs) else logprobs


def _norm(word: str) -> str:
    return word.strip(".,!?;:\"'()").lower()


def _common_prefix(a: list[str], b: list[str]) -> int:
    """How many leading words two transcripts share, ignoring case and punctuation."""
    n = 0
    for x, y in zip(a, b):
        if _norm(x) != _norm(y):
            break
        n += 1
    return n
