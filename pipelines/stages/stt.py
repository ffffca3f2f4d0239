"""Speech to text: the user's turns become transcripts for the client and the LM."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator

import numpy as np

from pipelines import cpu
from pipelines.interfaces import Transcriber
from pipelines.messages import (
    Downstream,
    PartialHeard,
    PartialUtterance,
    StageOutput,
    TranscriptCompleted,
    TranscriptDelta,
    TranscriptFailed,
    UserTurn,
    UserWordsSoFar,
    Utterance,
    WordLogprobs,
)
from pipelines.stages.base import SessionContext, Stage

logger = logging.getLogger(__name__)


# How long a session's end waits for a partial transcript still being made off the stage's thread.
ASIDE_DRAIN_S = 30.0


class SttStage(Stage):
    """Transcribes turns. In a unit (``later`` set) partial transcripts are made on a thread of their own,
    so that the turn's final transcript, which the answer waits for, never waits behind a partial one that
    began as the user stopped (the engine runs calls side by side: faster-whisper's ``num_workers``)."""

    name = "stt"

    def __init__(self, context: SessionContext, transcriber: Transcriber) -> None:
        super().__init__(context)
        self.transcriber = transcriber
        self._aside: queue.SimpleQueue[PartialUtterance | None] = queue.SimpleQueue()
        self._aside_idle = threading.Event()
        self._aside_idle.set()
        self._aside_thread: threading.Thread | None = None
        self.on_session_end()

    def on_session_end(self) -> None:
        # Nothing of a session outlives it: a partial still being made is waited for (its result, of an
        # older generation, is then dropped by the unit).
        if not self._aside_idle.wait(ASIDE_DRAIN_S):
            logger.warning("a partial transcript took over %.0f s; the session ends without it", ASIDE_DRAIN_S)
        self._partial_item = ""
        self._said: list[str] = []  # words already sent as deltas for _partial_item
        self._last: list[str] = []  # words of the latest partial transcript
        self._speculated: tuple[str, str] = ("", "")  # (item, turn) of the last speculative final
        self._finished = ""  # the item whose final transcript is out: a partial of it that comes later is dropped

    def cleanup(self) -> None:
        if self._aside_thread is not None:
            self._aside.put(None)

    def process(self, msg: Downstream) -> Iterator[StageOutput]:
        if isinstance(msg, PartialUtterance) and self.later is not None:
            self._set_aside(msg)
        elif isinstance(msg, (PartialUtterance, PartialHeard)):  # a stage on its own (tests) makes it here
            try:
                text = msg.text if isinstance(msg, PartialHeard) else self._transcribe(msg.samples)
                yield from self._partial(msg, text)
            finally:
                self.context.partial_pending.clear()
        elif isinstance(msg, Utterance):
            yield from self._final(msg)
        else:
            yield msg

    def _set_aside(self, msg: PartialUtterance) -> None:
        if self._aside_thread is None:
            self._aside_thread = threading.Thread(target=self._make_partials, name="stt-partials", daemon=True)
            self._aside_thread.start()
        self._aside_idle.clear()
        self._aside.put(msg)

    def _make_partials(self) -> None:
        """The partials' thread: each transcript goes back to the stage's thread (``later``)."""
        while (msg := self._aside.get()) is not None:
            try:
                with cpu.current().busy(), cpu.serving(self.context.urgency(msg), owner=self.context):
                    text = self._transcribe(msg.samples)
            except Exception:
                logger.exception("partial transcription failed; the turn's final transcript will tell")
                text = ""
            try:
                assert self.later is not None
                self.later(PartialHeard(generation=msg.generation, item_id=msg.item_id, text=text))
            finally:
                self._aside_idle.set()

    def _transcribe(self, samples: bytes) -> str:
        audio = np.frombuffer(samples, dtype=np.float32)
        settings = self.context.settings
        with cpu.current().core():
            return self.transcriber.transcribe(
                audio, settings.transcription_language, settings.transcription_prompt
            ).strip()

    def _transcribe_final(self, samples: bytes) -> tuple[str, WordLogprobs | None]:
        """The final transcript, with its words' log probabilities when the session asked for them."""
        settings = self.context.settings
        if not settings.transcription_logprobs:
            return self._transcribe(samples), None
        audio = np.frombuffer(samples, dtype=np.float32)
        with cpu.current().core():
            words = tuple(
                self.transcriber.transcribe_words(audio, settings.transcription_language, settings.transcription_prompt)
            )
        return "".join(word for word, _ in words).strip(), words

    def _partial(self, msg: PartialUtterance | PartialHeard, text: str) -> Iterator[StageOutput]:
        """Sends the words two partial transcripts agree on (never the newest one): deltas only append."""
        item, turn = self._speculated
        if item == msg.item_id and not self.context.turn_abandoned(turn):
            return  # the turn's final transcript is already out (or held): a late partial would follow it
        if msg.item_id == self._finished:
            return
        if msg.item_id != self._partial_item:
            self._partial_item, self._said, self._last = msg.item_id, [], []
        words = text.split()
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

    def _final(self, msg: Utterance) -> Iterator[StageOutput]:
        """A finished turn, or a speculative one (``msg.turn``) whose output is held until confirmed. A speculative
        one the speaker already went on from is not transcribed: with speech that barely pauses, those queued
        up, each longer than the last, and held everything behind them (a typed question's response)."""
        if msg.turn and self.context.turn_abandoned(msg.turn):
            return
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
            self._finished = msg.item_id
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
