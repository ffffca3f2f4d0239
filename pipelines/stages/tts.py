"""Text to speech: speaks the response sentence by sentence, in the session's output format."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np

from pipelines import audio, cpu
from pipelines.config import SPEED_RANGE
from pipelines.interfaces import Synthesizer
from pipelines.messages import (
    AudioOut,
    Downstream,
    ResponseEnd,
    ResponseFinished,
    SpokenText,
    StageOutput,
    TextForSpeech,
)
from pipelines.speech_order import SpeechOrder
from pipelines.spoken import for_speech
from pipelines.stages.base import CancelFlag, SessionContext, Stage

logger = logging.getLogger(__name__)

DELTA_MS = 100  # size of each audio delta sent to the client


class TtsStage(Stage):
    """Looks up the voice, synthesizes, resamples, and cuts the audio into small deltas."""

    name = "tts"

    def __init__(
        self, context: SessionContext, voices: dict[str, Synthesizer], order: SpeechOrder | None = None
    ) -> None:
        super().__init__(context)
        self.voices = voices
        self.order = order  # shared by the units: each response's first sentence is synthesized first
        self._started: dict[str, float] = {}
        self._first_audio: dict[str, float] = {}
        self._failed: dict[str, str] = {}

    def on_session_end(self) -> None:
        self._started.clear()
        self._first_audio.clear()
        self._failed.clear()

    def process(self, msg: Downstream) -> Iterator[StageOutput]:
        if isinstance(msg, TextForSpeech):
            yield from self._speak(msg)
        elif isinstance(msg, ResponseEnd):
            yield self._finish(msg)
        else:
            yield msg

    def _speak(self, msg: TextForSpeech) -> Iterator[StageOutput]:
        if self.order is None:
            yield from self._synthesize(msg)
            return
        cancel = CancelFlag(self.context, msg.response_id, msg.generation, msg.turn)
        waiting = time.monotonic()
        with self.order.turn(first=msg.response_id not in self._first_audio, cancel=cancel) as admitted:
            if msg.timeline is not None and msg.response_id not in self._first_audio:
                msg.timeline.add("tts_order_wait_s", time.monotonic() - waiting)
            if admitted:
                yield from self._synthesize(msg)

    def _synthesize(self, msg: TextForSpeech) -> Iterator[StageOutput]:
        cancel = CancelFlag(self.context, msg.response_id, msg.generation, msg.turn)
        if cancel.is_set() or msg.response_id in self._failed:
            return
        self._started.setdefault(msg.response_id, time.perf_counter())
        try:
            voice = self.voices[msg.voice]
        except KeyError:
            self._failed[msg.response_id] = f"unknown voice {msg.voice!r}"
            return
        out_rate = audio.RATES[msg.output_format]
        step = out_rate * DELTA_MS // 1000
        transcript_pending = msg.text
        # The words go out now, ahead of their audio (as the hosted API sends them): a client shows them while
        # they are synthesized, and the audio that starts them says where they begin (conversation.item.truncate).
        yield SpokenText(
            generation=msg.generation, response_id=msg.response_id, text=msg.text, turn=msg.turn, timeline=msg.timeline
        )
        try:
            low, high = SPEED_RANGE
            said = for_speech(msg.text)  # numbers, units and symbols in words; the transcript keeps msg.text
            for chunk in cpu.stepwise(voice.synthesize(said, cancel, speed=min(high, max(low, msg.speed)))):
                if cancel.is_set():
                    return
                samples = audio.resample(np.asarray(chunk, dtype=np.float32), voice.sample_rate, out_rate)
                for at in range(0, len(samples), step):
                    if cancel.is_set():
                        return
                    self._first_audio.setdefault(msg.response_id, time.perf_counter())
                    if msg.timeline is not None:
                        msg.timeline.mark("tts_first_audio")
                    yield AudioOut(
                        generation=msg.generation,
                        response_id=msg.response_id,
                        data=audio.encode(samples[at : at + step], msg.output_format),
                        transcript=transcript_pending,
                        turn=msg.turn,
                        timeline=msg.timeline,
                    )
                    transcript_pending = ""
        except Exception as exc:
            logger.exception("synthesis failed")
            self._failed[msg.response_id] = f"{type(exc).__name__}: {exc}"

    def _finish(self, msg: ResponseEnd) -> ResponseFinished:
        status, reason = msg.status, msg.reason
        failure = self._failed.pop(msg.response_id, None)
        if failure and status == "completed":
            status, reason = "failed", f"text to speech failed: {failure}"
        cancelled = self.context.cancel_reason(msg.response_id, msg.generation, msg.turn)
        if status == "completed" and cancelled is not None:
            status, reason = "cancelled", cancelled
        latencies: dict[str, float] = {}
        if msg.lm_first_token_s is not None:
            latencies["lm_first_token_s"] = msg.lm_first_token_s
        started = self._started.pop(msg.response_id, None)
        first = self._first_audio.pop(msg.response_id, None)
        if started is not None and first is not None:
            latencies["tts_first_audio_s"] = first - started
        return ResponseFinished(
            generation=msg.generation,
            response_id=msg.response_id,
            status=status,
            input_tokens=msg.input_tokens,
            output_tokens=msg.output_tokens,
            cached_tokens=msg.cached_tokens,
            reason=reason,
            latencies=latencies,
            turn=msg.turn,
            error_code=msg.error_code if status == msg.status else None,
            breakdown={} if msg.timeline is None else msg.timeline.breakdown(),
            timeline=msg.timeline,
        )
