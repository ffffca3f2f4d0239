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
    TranscriptFailed,
    UserTurn,
    Utterance,
)
from pipelines.stages.base import SessionContext, Stage

logger = logging.getLogger(__name__)


class Transcriber(Protocol):
    def transcribe(self, audio: np.ndarray, language: str | None = None) -> str: ...


class SttStage(Stage):
    name = "stt"

    def __init__(self, context: SessionContext, transcriber: Transcriber) -> None:
        super().__init__(context)
        self.transcriber = transcriber
        self._partial_item = ""
        self._partial_text = ""

    def on_session_end(self) -> None:
        self._partial_item = ""
        self._partial_text = ""

    def process(self, msg: Downstream) -> Iterator[Message]:
        if isinstance(msg, PartialUtterance):
            yield from self._partial(msg)
        elif isinstance(msg, Utterance):
            yield from self._final(msg)
        else:
            yield msg

    def _transcribe(self, samples: bytes) -> str:
        audio = np.frombuffer(samples, dtype=np.float32)
        return self.transcriber.transcribe(audio, self.context.settings.transcription_language).strip()

    def _partial(self, msg: PartialUtterance) -> Iterator[Message]:
        if msg.item_id != self._partial_item:
            self._partial_item, self._partial_text = msg.item_id, ""
        text = self._transcribe(msg.samples)
        # Deltas only ever append: a partial that rewrites earlier words waits for the final one.
        if text.startswith(self._partial_text) and len(text) > len(self._partial_text):
            delta = text[len(self._partial_text):]
            self._partial_text = text
            yield TranscriptDelta(generation=msg.generation, item_id=msg.item_id, delta=delta)

    def _final(self, msg: Utterance) -> Iterator[Message]:
        """A finished turn, or a speculative one (``msg.turn``) whose output is held until confirmed."""
        started = time.perf_counter()
        try:
            text = self._transcribe(msg.samples)
        except Exception as exc:
            logger.exception("transcription failed")
            yield TranscriptFailed(generation=msg.generation, item_id=msg.item_id,
                                   message=f"{type(exc).__name__}: {exc}", turn=msg.turn)
            return
        elapsed = time.perf_counter() - started
        said = self._partial_text if msg.item_id == self._partial_item else ""
        if text.startswith(said) and len(text) > len(said):
            yield TranscriptDelta(generation=msg.generation, item_id=msg.item_id, delta=text[len(said):], turn=msg.turn)
        if not msg.turn:  # a speculative turn may yet be abandoned: partials go on from here
            self._partial_item, self._partial_text = "", ""
        yield TranscriptCompleted(generation=msg.generation, item_id=msg.item_id, transcript=text, stt_s=elapsed, turn=msg.turn)
        yield UserTurn(
            generation=msg.generation,
            item_id=msg.item_id,
            text=text,
            create_response=msg.create_response and bool(text),
            response=msg.response,
            turn=msg.turn,
        )
