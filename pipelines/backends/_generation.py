"""What every in-process LM generation shares, whatever its engine (transformers, llama.cpp).

The sampler's settings, the length of the prompt a cache already holds, and the counting of one
generation (``Generation``): tokens in and out, and why it ended. Written once here so that the
engines' streams report alike and neither engine's module imports the other's.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence

from pipelines.interfaces import Cancel

REPETITION_PENALTY = 1.1
TOP_K = 50
TOP_P = 0.95


def shared_prefix(held: Sequence[int], prompt_ids: Sequence[int]) -> int:
    """How many of ``prompt_ids`` a cache holding ``held`` already has, leaving at least one to feed:
    a generation needs the last prompt token's forward pass for its first token."""
    common = 0
    for a, b in zip(held, prompt_ids):
        if a != b:
            break
        common += 1
    return min(common, len(prompt_ids) - 1)


class Generation:
    """One generation's account: iterate the stream for text pieces; afterwards ``input_tokens``,
    ``cached_tokens`` (of the prompt, read from a KV cache instead of computed), ``output_tokens`` and
    ``finish_reason`` ("stop", "length" or "cancelled") describe it. ``cancel.set()`` stops it."""

    def __init__(self, prompt_ids: list[int], max_new_tokens: int, cancel: Cancel | None) -> None:
        self._prompt_ids = prompt_ids
        self._max_new_tokens = max_new_tokens
        self._cancel = cancel
        self.input_tokens = len(prompt_ids)
        self.cached_tokens = 0
        self.output_tokens = 0
        self.finish_reason: str | None = None

    def _cancelled(self) -> bool:
        return self._cancel is not None and self._cancel.is_set()

    def _accepted(self, tokens: Iterator[int], is_stop: Callable[[int], bool]) -> Generator[int, None, None]:
        """The answer's tokens among the sampled ``tokens``: up to a cancellation (looked at before each
        token is computed and after), an end-of-generation token, or ``max_new_tokens``."""
        self.finish_reason = "length"
        while self.output_tokens < self._max_new_tokens:
            if self._cancelled():
                self.finish_reason = "cancelled"
                return
            token = next(tokens, None)
            if token is None:
                return
            if self._cancelled():
                self.finish_reason = "cancelled"
                return
            if is_stop(token):
                self.finish_reason = "stop"
                return
            self.output_tokens += 1
            yield token
