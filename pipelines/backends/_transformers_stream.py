"""One transformers generation: a manual token loop over a private KV cache, and the sampler."""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from pipelines.interfaces import Cancel

from ._decode import text_pieces, tokenizer_decode
from ._generation import REPETITION_PENALTY, TOP_K, TOP_P, Generation, shared_prefix

if TYPE_CHECKING:
    from ._transformers_grammar import ToolConstraint

logger = logging.getLogger(__name__)


class CausalLM(Protocol):
    """What a generation reads of its loaded model (``transformers_lm.TransformersLM``)."""

    model: Any
    tokenizer: Any
    device: str
    stop_ids: frozenset[int]


class PrefixCache:
    """The KV cache of one conversation, kept between its turns.

    Each turn's prompt starts with the previous turn's prompt and answer, so
    only the new tokens need a forward pass. Owned by one session on one
    thread; a prompt that diverges (trimmed history, an abandoned speculative
    turn) reuses the common prefix and recomputes the rest.
    """

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.cache = None  # transformers.DynamicCache holding exactly ``ids``

    def take(self, prompt_ids: list[int]):  # -> tuple[DynamicCache, int]
        """A cache holding a prefix of ``prompt_ids`` (at least one token left to feed), and its length."""
        from transformers import DynamicCache

        common = shared_prefix(self.ids, prompt_ids)
        if self.cache is None or common <= 0:
            self.ids, self.cache = [], None
            return DynamicCache(), 0
        cache, self.cache = self.cache, None  # in use: a failed turn leaves nothing half-written behind
        surplus = cache.get_seq_length() - common
        if surplus > 0:
            cache.crop(-surplus)  # a negative count removes that many tokens from the end
        return cache, common

    def keep(self, cache, ids: list[int]) -> None:
        self.cache, self.ids = cache, ids


class LMStream(Generation):
    """Iterate once, from one thread, for text pieces; then read the counts (``Generation``)."""

    def __init__(
        self,
        lm: CausalLM,
        prompt_ids: list[int],
        max_new_tokens: int,
        temperature: float,
        cancel: Cancel | None,
        seed: int | None,
        prefix: PrefixCache | None = None,
        constraint: ToolConstraint | None = None,
    ) -> None:
        super().__init__(prompt_ids, max_new_tokens, cancel)
        self._lm = lm
        self._temperature = temperature
        self._seed = seed
        self._prefix = prefix
        self._constraint = constraint

    def __iter__(self) -> Iterator[str]:
        yield from text_pieces(self._tokens(), tokenizer_decode(self._lm.tokenizer))

    def _tokens(self) -> Iterator[int]:
        import torch
        from transformers import DynamicCache

        lm = self._lm
        processors = self._logits_processors()
        generator = None
        if self._seed is not None:
            generator = torch.Generator(device=lm.device).manual_seed(self._seed)
        all_ids = torch.tensor([self._prompt_ids], device=lm.device)
        if self._prefix is not None:
            cache, cached = self._prefix.take(self._prompt_ids)
        else:
            cache, cached = DynamicCache(), 0
        self.cached_tokens = cached
        ids = all_ids[:, cached:]
        fed = list(self._prompt_ids)  # what the cache will hold after the next forward pass
        sampled = self._sampled(lm, processors, generator, ids, all_ids, cache, fed)
        try:
            yield from self._accepted(sampled, lm.stop_ids.__contains__)
        finally:
            sampled.close()
            if self._prefix is not None and cache.get_seq_length() == len(fed):
                self._prefix.keep(cache, fed)

    def _sampled(self, lm, processors, generator, ids, all_ids, cache, fed: list[int]) -> Generator[int, None, None]:
        """Samples tokens for as long as it is asked; ``fed`` grows with each token right before the
        forward pass that feeds it."""
        import torch

        pending: int | None = None
        while True:
            if pending is not None:
                fed.append(pending)
            with torch.inference_mode():
                out = lm.model(input_ids=ids, cache=cache, use_cache=True)  # fills cache in place
                token = self._choose(processors, all_ids, out.logits[:, -1, :].float(), generator)
            token_id = int(token[0, 0])
            if self._constraint is not None:
                self._constraint.accept(token_id)
            ids = token
            all_ids = torch.cat([all_ids, token], dim=1)
            pending = token_id
            yield token_id

    def _choose(self, processors, all_ids, logits, generator):  # -> torch.Tensor of shape [1, 1]
        """The next token: sampled, or the most likely one allowed inside a tool call.

        A call's arguments are data copied from the conversation, so they are
        decoded greedily and without the repetition penalty, which would push
        the model away from the very words it must copy.
        """
        import torch

        constraint = self._constraint
        if constraint is not None and constraint.in_call:
            constraint.mask(logits)
            return logits.argmax(dim=-1, keepdim=True)
        logits = processors(all_ids, logits)
        if self._temperature > 0:
            probs = torch.softmax(logits, dim=-1)
            return torch.multinomial(probs, 1, generator=generator)
        return logits.argmax(dim=-1, keepdim=True)

    def _logits_processors(self):  # -> transformers.LogitsProcessorList
        return sampling_processors(self._temperature, self._constraint)


def sampling_processors(temperature: float, constraint: ToolConstraint | None = None):  # -> LogitsProcessorList
    """The sampler of every generation: repetition penalty, a tool constraint's mask, then temperature, top-k, top-p."""
    from transformers import (
        LogitsProcessorList,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    processors = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(REPETITION_PENALTY)])
    if constraint is not None:  # before top-k/top-p, which must choose among allowed tokens
        processors.append(_Masking(constraint))
    if temperature > 0:
        processors.extend([TemperatureLogitsWarper(temperature), TopKLogitsWarper(TOP_K), TopPLogitsWarper(TOP_P)])
    return processors


class _Masking:
    """A logits processor that applies a tool constraint's mask."""

    def __init__(self, constraint: ToolConstraint) -> None:
        self._constraint = constraint

    def __call__(self, input_ids, scores):
        self._constraint.mask(scores)
        return scores
