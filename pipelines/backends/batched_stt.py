"""Batched speech to text: utterances that end at about the same time share one Whisper call.

Each unit's STT stage calls ``transcribe`` as before, from its own thread. The
first request opens a short window (``window_ms``); whatever arrives in it
(up to ``max_batch``) is transcribed by one ``transcribe_batch`` call on a
single worker thread, grouped by language and prompt, and each caller gets its
own text back. A lone utterance waits at most the window.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

logger = logging.getLogger(__name__)

RESULT_TIMEOUT_S = 120.0


class BatchTranscriber(Protocol):
    def transcribe(self, audio: np.ndarray, language: str | None = None, prompt: str | None = None) -> str: ...

    def transcribe_batch(
        self, audios: list[np.ndarray], language: str | None = None, prompt: str | None = None
    ) -> list[str]: ...

    def transcribe_words(
        self, audio: np.ndarray, language: str | None = None, prompt: str | None = None
    ) -> tuple[tuple[str, float], ...]: ...


@dataclass
class _Request:
    audio: np.ndarray
    language: str | None
    prompt: str | None
    done: threading.Event = field(default_factory=threading.Event)
    text: str = ""
    error: BaseException | None = None


class BatchedTranscriber:
    """A ``Transcriber`` whose concurrent calls are batched; ``stats()`` counts calls and utterances."""

    def __init__(self, engine: BatchTranscriber, window_ms: int = 30, max_batch: int = 8) -> None:
        self.engine = engine
        self.window_s = window_ms / 1000
        self.max_batch = max(1, max_batch)
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._calls = 0
        self._utterances = 0
        self._thread = threading.Thread(target=self._run, name="stt-batch", daemon=True)
        self._thread.start()

    def transcribe(self, audio: np.ndarray, language: str | None = None, prompt: str | None = None) -> str:
        if not self._thread.is_alive():
            raise RuntimeError("the STT batch worker is stopped")
        request = _Request(np.asarray(audio, dtype=np.float32).reshape(-1), language, prompt)
        self._requests.put(request)
        if not request.done.wait(RESULT_TIMEOUT_S):
            raise TimeoutError("the STT batch worker did not answer")
        if request.error is not None:
            raise request.error
        return request.text

    def transcribe_words(
        self, audio: np.ndarray, language: str | None = None, prompt: str | None = None
    ) -> tuple[tuple[str, float], ...]:
        """Words with log probabilities (asked for by clients that want logprobs): one call, unbatched."""
        return self.engine.transcribe_words(audio, language, prompt)

    def close(self, timeout: float = 5.0) -> None:
        self._requests.put(None)
        self._thread.join(timeout)

    def stats(self) -> dict[str, float]:
        return {"calls": self._calls, "utterances": self._utterances}

    def _run(self) -> None:
        while True:
            first = self._requests.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.window_s
            stop = False
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    request = self._requests.get(timeout=left) if left > 0 else self._requests.get_nowait()
                except queue.Empty:
                    break
                if request is None:
                    stop = True
                    break
                batch.append(request)
            self._transcribe(batch)
            if stop:
                return

    def _transcribe(self, batch: list[_Request]) -> None:
        groups: dict[tuple[str | None, str | None], list[_Request]] = {}
        for request in batch:
            groups.setdefault((request.language, request.prompt), []).append(request)
        for (language, prompt), group in groups.items():
            try:
                texts = self.engine.transcribe_batch([r.audio for r in group], language, prompt)
            except Exception as exc:
                logger.exception("batched transcription of %d utterance(s) failed", len(group))
                for request in group:
                    request.error = exc
            else:
                for request, text in zip(group, texts):
                    request.text = text
            self._calls += 1
            self._utterances += len(group)
            for request in group:
                request.done.set()


__all__ = ["BatchedTranscriber"]
