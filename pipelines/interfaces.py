"""What an engine must do, as the stages use it: one Protocol per kind of engine.

A backend (``pipelines/backends/``) satisfies one of these and is found through
``pipelines/backends/registry.py``; the stages know only these shapes, never a backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pipelines.messages import FunctionTool, ToolChoice, WordLogprobs


class Cancel(Protocol):
    """How an engine learns that its work is no longer wanted: a ``threading.Event``, or the stages' ``CancelFlag``."""

    def is_set(self) -> bool: ...


class VadState(Protocol):
    """One session's recurrent state of a VAD model."""

    def prob(self, frame: np.ndarray) -> float: ...
    def reset(self) -> None: ...


class VadModel(Protocol):
    """Scores speech in 32 ms frames; shared by the units, each session with its own state."""

    def new_state(self) -> VadState: ...


class TurnModel(Protocol):
    """Whether a turn sounds finished: its end-of-turn probability (semantic_vad, Smart Turn)."""

    def probability(self, samples: np.ndarray) -> float: ...


class TextTurnModel(Protocol):
    """Whether a turn's words read as finished (semantic_vad's words check)."""

    def finished_probability(self, transcript: str) -> float: ...


class Denoiser(Protocol):
    """One session's streaming denoiser."""

    def process(self, chunk: np.ndarray) -> np.ndarray: ...
    def flush(self) -> np.ndarray: ...
    def close(self) -> None: ...


class DenoiserModel(Protocol):
    """A loaded noise suppressor (``audio.input.noise_reduction``), shared by the units."""

    rate: int  # the sample rate it works at

    def new_state(self, attenuation_limit_db: float | None = None) -> Denoiser: ...


class Transcriber(Protocol):
    """Speech to text of one utterance (16 kHz float32)."""

    def transcribe(self, audio: np.ndarray, language: str | None = None, prompt: str | None = None) -> str: ...

    def transcribe_words(
        self, audio: np.ndarray, language: str | None = None, prompt: str | None = None
    ) -> WordLogprobs:
        """The transcript's words (each with its leading space) and their natural-log probabilities."""
        ...


class LMStream(Protocol):
    """One generation: iterate it for text pieces, then read its token counts."""

    input_tokens: int
    output_tokens: int

    def __iter__(self) -> Iterator[str]: ...


class LanguageModel(Protocol):
    """``messages`` are in transformers' chat shape, tool calls and tool results included.

    ``generate_stream`` receives ``tools`` and ``tool_choice`` only when the
    response offers tools; it writes calls in the ``pipelines.tool_calls`` format. ``prefix`` is
    the engine's own prompt cache (``new_prefix_cache()``), passed only to an engine that makes one.
    """

    context_length: int

    def count_tokens(self, messages: list[dict[str, Any]], tools: Sequence[FunctionTool] = ()) -> int: ...

    def generate_stream(
        self,
        messages: list[dict[str, Any]],
        max_new_tokens: int,
        temperature: float,
        cancel: Cancel | None = None,
        *,
        prefix: Any = None,
        tools: Sequence[FunctionTool] = (),
        tool_choice: ToolChoice = ToolChoice(),
        parallel_tool_calls: bool = True,
    ) -> LMStream: ...


# --- what a language model may do besides generating: declared, checked with isinstance, never probed --------


@runtime_checkable
class KeepsPrefixCache(Protocol):
    """An engine that keeps a conversation's prompt cache between its generations (the ``prefix`` argument)."""

    def new_prefix_cache(self) -> Any:
        """A new, empty cache for one conversation (the LM stage makes one per session)."""
        ...


@runtime_checkable
class ReadsAhead(KeepsPrefixCache, Protocol):
    """An engine that evaluates a prompt into a conversation's cache before it is asked to answer: the turn so
    far while the user speaks, the next answer's prompt between turns."""

    def prefill(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[FunctionTool] = (),
        prefix: Any = None,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Evaluates the prompt a generation over ``messages`` starts from into ``prefix``, until ``stop()``;
        returns the tokens evaluated."""
        ...


class Synthesizer(Protocol):
    """Text to speech with one voice."""

    sample_rate: int

    def synthesize(self, text: str, cancel: Cancel | None = None, speed: float = 1.0) -> Iterator[np.ndarray]:
        """Float32 mono chunks at ``sample_rate``; ``speed`` (SPEED_RANGE) scales the speaking rate."""
        ...
