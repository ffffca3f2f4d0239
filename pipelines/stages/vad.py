"""Turn detection: finds where the user starts and stops speaking, and buffers the turn."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterator

import numpy as np

from pipelines import audio, cpu
from pipelines.config import ENGINE_DEFAULTS
from pipelines.ids import new_id
from pipelines.input_audio import InputAudio
from pipelines.interfaces import DenoiserModel, TextTurnModel, TurnModel, VadModel, VadState
from pipelines.messages import (
    AudioCleared,
    AudioCommitted,
    AudioIn,
    AudioItem,
    ClearAudio,
    CommitAudio,
    Downstream,
    PartialUtterance,
    PipelineError,
    SpeechStarted,
    SpeechStopped,
    StageOutput,
    TurnAbandoned,
    TurnConfirmed,
    Utterance,
)
from pipelines.stages.base import SessionContext, Stage
from pipelines.timeline import Timeline

logger = logging.getLogger(__name__)

FRAME = 512  # samples at 16 kHz, 32 ms: the frame Silero scores
FRAME_MS = FRAME * 1000 // audio.PIPELINE_RATE
MIN_COMMIT_MS = 100
# Speech heard while the assistant speaks adds up across pauses shorter than this ("Hold on, ...").
GATE_PAUSE_MS = 500
MAX_BUFFER_S = 15 * 60  # an uncommitted buffer longer than this is cut from the front


# semantic_vad: the longest silence after an unfinished-sounding turn before it ends anyway (the API's
# documented waits), and the end-of-turn probability above which a turn counts as finished.
SEMANTIC_MAX_WAIT_MS = {"low": 8000, "medium": 4000, "auto": 4000, "high": 2000}
SEMANTIC_THRESHOLD = {"low": 0.7, "medium": 0.5, "auto": 0.5, "high": 0.3}
# The words' check (a text turn model on the speculative transcript): the chance of a finished message
# below which the words overrule a finished-sounding pause, and how long such a pause then waits for more
# speech before the turn ends anyway (half the longest wait). A transcript that Whisper ends with a question
# mark needs QUESTION_MARK_WEIGHT times less. Chosen by bench/turn_words.py; the figures: docs/benchmarks.md,
# "Reading a turn's words as a quote".
SEMANTIC_TEXT_FLOOR = {"low": 0.3, "medium": 0.2, "auto": 0.2, "high": 0.08}
QUESTION_MARK_WEIGHT = 100
SEMANTIC_TEXT_WAIT_MS = {name: wait // 2 for name, wait in SEMANTIC_MAX_WAIT_MS.items()}
# The chance of a finished message at or above which the words overrule an unfinished-sounding pause (Smart
# Turn hears some complete questions as going on); the question mark weighs as in the floor. Words over the
# floor and under this mark end such a pause after half the longest wait. The figures: as for the floor.
SEMANTIC_TEXT_SURE = {"low": 0.8, "medium": 0.5, "auto": 0.5, "high": 0.3}
# How long after the turn model's verdict the words may take to come from the STT; later, the sound decides.
WORDS_DUE_MS = 800


def words_floor(eagerness: str, transcript: str) -> float:
    """The words' floor for ``transcript``: a finished-sounding pause whose words read under it waits."""
    return weighed(SEMANTIC_TEXT_FLOOR[eagerness], transcript)


def words_sure(eagerness: str, transcript: str) -> float:
    """The reading at or above which ``transcript`` ends an unfinished-sounding pause."""
    return weighed(SEMANTIC_TEXT_SURE[eagerness], transcript)


def weighed(bound: float, transcript: str) -> float:
    """``bound`` as it applies to ``transcript``: lower by the question mark's weight when Whisper ends it with one."""
    return bound / QUESTION_MARK_WEIGHT if transcript.rstrip().endswith("?") else bound


class VadStage(Stage):
    """Scores 32 ms frames; with turn detection on, cuts turns, otherwise only buffers.

    ``server_vad`` ends a turn after a fixed silence. ``semantic_vad`` asks the turn model,
    once per pause, after ``check_after_ms`` of silence: an unfinished-sounding turn waits for
    more speech up to the eagerness's longest wait. The model is asked once because its
    end-of-turn probability rises as more silence is fed to it, for unfinished sentences too.
    A finished-sounding turn ends at once, unless a text turn model reads its words (the
    transcript of the turn sent ahead at ``semantic_speculate_after_ms``) as unfinished, e.g. "I'd like
    to order a": then it waits for more speech up to half the longest wait. The words may also
    overrule an unfinished-sounding turn, when they read as finished beyond doubt
    (``SEMANTIC_TEXT_SURE``, e.g. "How are you today"): it ends once they are read. Words that read
    as finished but not beyond doubt (over the floor, under that mark) disagree with the sound as
    unfinished words disagree with a finished sound: the turn ends after half the longest wait.
    Without a turn model (the loopback profile) a pause of ``check_after_ms`` ends the turn.

    A turn that reaches ``max_turn_ms`` without a pause (a TV, a fan, someone who never stops) ends
    there as if the speaker had paused: committed and answered, and the sound that goes on starts the
    next turn. Without this, unbroken sound would hold the turn open for good, every partial and
    speculative transcript of it longer than the last.

    While the assistant speaks, speech counts as a barge-in (``SpeechStarted``, which
    cancels the response) only once ``min_interrupt_ms`` of it has been heard; a shorter
    sound (a cough, a click, "mm-hmm") is dropped without a trace.
    """

    name = "vad"

    def __init__(
        self,
        context: SessionContext,
        model: VadModel,
        partial_every_ms: int = ENGINE_DEFAULTS.partial_every_ms,
        max_turn_ms: int = int(ENGINE_DEFAULTS.max_turn_s * 1000),
        speculate_after_ms: int = ENGINE_DEFAULTS.speculate_after_ms,
        semantic_speculate_after_ms: int | None = None,
        turn_model: TurnModel | None = None,
        check_after_ms: int = ENGINE_DEFAULTS.smart_turn_silence_ms,
        min_interrupt_ms: int = ENGINE_DEFAULTS.min_interrupt_ms,
        text_model: TextTurnModel | None = None,
        denoiser: DenoiserModel | None = None,
    ) -> None:
        super().__init__(context)
        self.model = model
        self._input = InputAudio(denoiser)  # the denoiser is shared; each session gets its own state
        self.partial_every_ms = partial_every_ms
        self.max_turn_ms = max_turn_ms
        self.speculate_after_ms = speculate_after_ms
        self.semantic_speculate_after_ms = (
            speculate_after_ms if semantic_speculate_after_ms is None else semantic_speculate_after_ms
        )
        self.turn_model = turn_model
        self.text_model = text_model
        self.check_after_ms = check_after_ms
        self.min_interrupt_ms = min_interrupt_ms
        self._state: VadState | None = None
        self._reset_session()

    def setup(self) -> None:
        self._state = self.model.new_state()
        self._state.prob(np.zeros(FRAME, dtype=np.float32))  # first-call costs now, not in a session
        self._state.reset()

    def _reset_session(self) -> None:
        self._input.close()  # a new session starts a new chain (filters, denoiser state)
        self._pending = np.zeros(0, dtype=np.float32)
        self._buffer: list[np.ndarray] = []  # the current turn, 16 kHz
        self._prefix: collections.deque[np.ndarray] = collections.deque()
        self._processed_ms = 0
        self._speaking = False
        self._speech_frames = 0
        self._silence_ms = 0
        self._item_id = ""
        self._start_ms = 0
        self._since_partial_ms = 0
        self._speculation = ""  # the turn sent ahead while the silence window is still open
        self._timeline: Timeline | None = None  # the speculation's
        self._speech_end_at = 0.0
        self._rounds = 0
        # Of the current pause: "" (not asked), "unfinished", "unfinished, words read", "sounds finished",
        # "disagree" (the sound and the words: the turn ends after the half wait).
        self._verdict = ""
        self._gated = False  # speech while the assistant speaks, not yet long enough to interrupt
        self._heard_ms = 0
        if self._state is not None:
            self._state.reset()

    def on_session_end(self) -> None:
        self._reset_session()

    def process(self, msg: Downstream) -> Iterator[StageOutput]:
        if isinstance(msg, AudioIn):
            yield from self._audio(msg)
        elif isinstance(msg, CommitAudio):
            yield from self._commit(msg)
        elif isinstance(msg, AudioItem):
            samples = audio.decode(msg.data, msg.audio_format)
            samples = audio.resample(samples, audio.RATES[msg.audio_format], audio.PIPELINE_RATE)
            yield Utterance(
                generation=msg.generation, item_id=msg.item_id, samples=samples.tobytes(), create_response=False
            )
        elif isinstance(msg, ClearAudio):
            self._buffer.clear()
            self._stop_speaking()
            if self._speculation:
                yield TurnAbandoned(generation=msg.generation, turn=self._speculation)
                self._speculation = ""
            yield AudioCleared(generation=msg.generation)
        else:
            yield msg

    def _audio(self, msg: AudioIn) -> Iterator[StageOutput]:
        settings = self.context.settings
        samples = self._input.process(msg.data, msg.audio_format, settings.noise_reduction)
        self._pending = np.concatenate([self._pending, samples])
        detection = settings.turn_detection
        while len(self._pending) >= FRAME:
            frame, self._pending = self._pending[:FRAME], self._pending[FRAME:]
            self._processed_ms += FRAME_MS
            if detection.type is None:
                self._buffer.append(frame)
                self._trim_buffer()
                continue
            yield from self._frame(msg.generation, frame)

    def _frame(self, generation: int, frame: np.ndarray) -> Iterator[StageOutput]:
        detection = self.context.settings.turn_detection
        assert self._state is not None
        prob = self._state.prob(frame)
        if not self._speaking:
            yield from self._onset(generation, frame, prob >= detection.threshold)
            return
        self._buffer.append(frame)
        self._since_partial_ms += FRAME_MS
        speech = prob >= max(0.0, detection.threshold - 0.15)
        if speech:
            self._silence_ms = 0
            self._verdict = ""
            self._speech_end_at = time.monotonic()
            if self._speculation:  # the user goes on: drop the work started ahead
                yield TurnAbandoned(generation=generation, turn=self._speculation)
                self._speculation = ""
                self.context.turn_ending.clear()
        else:
            self._silence_ms += FRAME_MS
        if self._gated:
            yield from self._gate(generation, speech)
        elif self._turn_ended() or self._too_long():
            yield from self._end_turn(generation)
        elif (after := self._speculate_after()) and not self._speculation and self._silence_ms >= after:
            # Start STT, LM and TTS now; their output is held until the turn ends.
            self._rounds += 1
            self._speculation = f"{self._item_id}#{self._rounds}"
            self._timeline = Timeline(self._speech_end_at)
            self._timeline.mark("speculation")
            self.context.turn_ending.set()
            yield Utterance(
                generation=generation,
                item_id=self._item_id,
                samples=self._samples(),
                create_response=detection.create_response,
                turn=self._speculation,
                timeline=self._timeline,
            )
        elif self._partial_due():
            self._since_partial_ms = 0
            self.context.partial_pending.set()
            yield PartialUtterance(generation=generation, item_id=self._item_id, samples=self._samples())

    def _speculate_after(self) -> int:
        """The silence after which the turn is sent ahead (0: never)."""
        if self.context.settings.turn_detection.type == "semantic_vad":
            return self.semantic_speculate_after_ms
        return self.speculate_after_ms

    def _partial_due(self) -> bool:
        """Time for a partial transcript, the STT is done with the last one, and a core is free.

        A partial that would queue behind another would only delay the turn's final transcript
        (partials of a long turn take longer than the second between them on a busy CPU). While
        every core computes (other sessions' answers), a partial and the LM's reading ahead of its
        words would take cores from answers due now: it waits for the next free moment.
        """
        return (
            bool(self.partial_every_ms)
            and self._since_partial_ms >= self.partial_every_ms
            and not self._silence_ms
            and not self.context.partial_pending.is_set()
            and cpu.current().working < cpu.current().cores
        )

    def _onset(self, generation: int, frame: np.ndarray, speech: bool) -> Iterator[StageOutput]:
        """Before a turn: keeps the prefix padding; two speech frames in a row start a turn (one is a click)."""
        detection = self.context.settings.turn_detection
        self._prefix.append(frame)
        keep = max(1, detection.prefix_padding_ms // FRAME_MS + 1)
        while len(self._prefix) > keep:
            self._prefix.popleft()
        self._speech_frames = self._speech_frames + 1 if speech else 0
        if self._speech_frames < 2:
            return
        self._speaking = True
        self._silence_ms = 0
        self._verdict = ""
        self._speech_end_at = time.monotonic()
        self._since_partial_ms = 0
        self.context.turn_ending.clear()
        self._item_id = new_id("item")
        self._buffer = list(self._prefix)
        self._prefix.clear()
        self._start_ms = max(0, self._processed_ms - len(self._buffer) * FRAME_MS)
        self._heard_ms = self._speech_frames * FRAME_MS
        self._gated = self.min_interrupt_ms > self._heard_ms and self.context.assistant_speaking()
        if not self._gated:
            yield SpeechStarted(generation=generation, item_id=self._item_id, audio_start_ms=self._start_ms)

    def _gate(self, generation: int, speech: bool) -> Iterator[StageOutput]:
        """Speech heard while the assistant speaks: a barge-in once long enough, else dropped at the pause."""
        if speech:
            self._heard_ms += FRAME_MS
        if self._heard_ms >= self.min_interrupt_ms:
            self._gated = False
            yield SpeechStarted(generation=generation, item_id=self._item_id, audio_start_ms=self._start_ms)
        elif self._silence_ms >= GATE_PAUSE_MS:
            logger.debug("dropped %d ms of speech heard while the assistant spoke", self._heard_ms)
            self._buffer = []
            self._stop_speaking()

    def _too_long(self) -> bool:
        """The turn has reached ``max_turn_ms`` (sound that never pauses): it ends here, as after a pause."""
        if len(self._buffer) * FRAME_MS < self.max_turn_ms:
            return False
        logger.info("a spoken turn reached %d ms without a pause: committed and answered", self.max_turn_ms)
        return True

    def _turn_ended(self) -> bool:
        detection = self.context.settings.turn_detection
        if detection.type != "semantic_vad":
            return self._silence_ms >= detection.silence_duration_ms
        eagerness = detection.eagerness if detection.eagerness in SEMANTIC_MAX_WAIT_MS else "auto"
        if self._silence_ms >= SEMANTIC_MAX_WAIT_MS[eagerness]:
            return True
        if self._silence_ms < self.check_after_ms or self._verdict == "unfinished, words read":
            return False
        if self._verdict == "disagree":
            return self._disagree(eagerness)
        if not self._verdict:
            self._verdict = "sounds finished" if self._sounds_finished(eagerness) else "unfinished"
        if self._verdict == "unfinished":
            return self._words_sure(eagerness)
        return self._words_finished(eagerness)

    def _sounds_finished(self, eagerness: str) -> bool:
        """The turn model's verdict on the pause (none: the pause ends the turn)."""
        if self.turn_model is None:
            return True
        started = time.perf_counter()
        try:
            probability = self.turn_model.probability(np.concatenate(self._buffer))
        except Exception:
            logger.exception("the turn model failed; the pause ends the turn")
            return True
        logger.debug(
            "turn model: %.2f (finished at %.2f) in %.0f ms",
            probability,
            SEMANTIC_THRESHOLD[eagerness],
            (time.perf_counter() - started) * 1000,
        )
        return probability >= SEMANTIC_THRESHOLD[eagerness]

    def _words_finished(self, eagerness: str) -> bool:
        """Whether the words of a finished-sounding turn agree; False (wait) while they are due."""
        if self.text_model is None or not self._speculation:
            return True  # no words to read: the sound decides
        words = self.context.words_of(self._speculation)
        if words is None:
            return self._silence_ms >= self.check_after_ms + WORDS_DUE_MS
        started = time.perf_counter()
        try:
            probability = self.text_model.finished_probability(words)
        except Exception:
            logger.exception("the text turn model failed; the sound decides")
            return True
        floor = words_floor(eagerness, words)
        logger.debug(
            "text turn model: %.3f for %r (finished at %.2f) in %.0f ms",
            probability,
            words,
            floor,
            (time.perf_counter() - started) * 1000,
        )
        if probability >= floor:
            return True
        return self._disagree(eagerness)

    def _words_sure(self, eagerness: str) -> bool:
        """Whether the words of an unfinished-sounding turn end it: at once when they read as finished beyond
        doubt, after the half wait when they read as finished (over the floor); read once."""
        if self.text_model is None or not self._speculation:
            return False
        words = self.context.words_of(self._speculation)
        if words is None:
            if self._silence_ms >= self.check_after_ms + WORDS_DUE_MS:
                self._verdict = "unfinished, words read"  # too late to help: the longest wait decides
            return False
        self._verdict = "unfinished, words read"
        if not any(char.isalnum() for char in words):
            return False  # no words (nothing heard, or the STT failed): the sound decides
        try:
            probability = self.text_model.finished_probability(words)
        except Exception:
            logger.exception("the text turn model failed; the turn waits")
            return False
        logger.debug("text turn model on an unfinished-sounding pause: %.3f for %r", probability, words)
        if probability >= words_sure(eagerness, words):
            return True
        if probability >= words_floor(eagerness, words):
            return self._disagree(eagerness)  # finished words, an unfinished sound
        return False

    def _disagree(self, eagerness: str) -> bool:
        """The sound and the words of the pause disagree: the turn ends after half the longest wait."""
        self._verdict = "disagree"
        return self._silence_ms >= SEMANTIC_TEXT_WAIT_MS[eagerness]

    def _stop_speaking(self) -> None:
        self._speaking = False
        self._speech_frames = 0
        self._silence_ms = 0
        self._verdict = ""
        self._gated = False

    def _end_turn(self, generation: int) -> Iterator[StageOutput]:
        detection = self.context.settings.turn_detection
        end_ms = self._processed_ms - self._silence_ms
        samples = self._samples()
        item_id = self._item_id
        self._stop_speaking()
        self._buffer = []
        speculation, self._speculation = self._speculation, ""
        timeline = self._timeline if speculation and self._timeline is not None else Timeline(self._speech_end_at)
        self._timeline = None
        timeline.mark("decision")
        self.context.turn_ending.set()
        yield SpeechStopped(
            generation=generation, item_id=item_id, audio_end_ms=end_ms, speech_end_at=self._speech_end_at
        )
        yield AudioCommitted(
            generation=generation,
            item_id=item_id,
            duration_ms=len(samples) // 4 * 1000 // audio.PIPELINE_RATE,
            samples=samples,
        )
        if speculation:
            yield TurnConfirmed(generation=generation, turn=speculation)
        else:
            yield Utterance(
                generation=generation,
                item_id=item_id,
                samples=samples,
                create_response=detection.create_response,
                timeline=timeline,
            )

    def _commit(self, msg: CommitAudio) -> Iterator[StageOutput]:
        # What the filters (and the denoiser) still hold belongs to this turn.
        self._pending = np.concatenate([self._pending, self._input.flush()])
        samples = self._samples() + self._pending.tobytes()
        duration = len(samples) // 4 * 1000 // audio.PIPELINE_RATE
        if duration < MIN_COMMIT_MS:
            yield PipelineError(
                generation=msg.generation,
                code="input_audio_buffer_commit_empty",
                event_id=msg.event_id,
                message=(
                    "Error committing input audio buffer: buffer too small. "
                    f"Expected at least {MIN_COMMIT_MS}ms of audio, but buffer only has {duration}ms of audio."
                ),
            )
            return
        self._buffer = []
        self._pending = np.zeros(0, dtype=np.float32)
        self._stop_speaking()
        if self._speculation:
            yield TurnAbandoned(generation=msg.generation, turn=self._speculation)
            self._speculation = ""
        yield AudioCommitted(generation=msg.generation, item_id=msg.item_id, duration_ms=duration, samples=samples)
        timeline = Timeline()  # the commit ends the turn
        timeline.mark("decision")
        yield Utterance(
            generation=msg.generation,
            item_id=msg.item_id,
            samples=samples,
            create_response=False,
            response=msg.response,
            timeline=timeline,
        )

    def _samples(self) -> bytes:
        if not self._buffer:
            return b""
        return np.concatenate(self._buffer).astype(np.float32).tobytes()

    def _trim_buffer(self) -> None:
        limit = MAX_BUFFER_S * 1000 // FRAME_MS
        if len(self._buffer) > limit:
            del self._buffer[: len(self._buffer) - limit]
