"""One generation: a manual token loop over a private KV cache."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .transformers_lm import TransformersLM

logger = logging.getLogger(__name__)


class LMStream:
    """Iterate for text pieces; afterwards ``input_tokens``, ``output_tokens`` and
    ``finish_reason`` ("stop", "length" or "cancelled") describe the generation.

    Iterate it once, from one thread. ``cancel.set()`` stops it before the next token.
    """

    def __init__(
        self,
        lm: TransformersLM,
        prompt_ids: list[int],
        max_new_tokens: int,
        temperature: float,
        cancel: threading.Event | None,
        seed: int | None,
    ) -> None:
        self._lm = lm
        self._prompt_ids = prompt_ids
        self._max_new_tokens = max_new_tokens
        self._temperature = temperature
        self._cancel = cancel
        self._seed = seed
        self.input_tokens = len(prompt_ids)
        self.output_tokens = 0
        self.finish_reason: str | None = None

    def __iter__(self) -> Iterator[str]:
        decoded = ""
        generated: list[int] = []
        for token in self._tokens():
            generated.append(token)
            text = self._lm.tokenizer.decode(
                generated, skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
            if text.endswith("\ufffd"):
                continue  # a multi-byte character is split across tokens
            if len(text) > len(decoded):
                yield text[len(decoded):]
                decoded = text

    def _tokens(self) -> Iterator[int]:
        import torch
        from transformers import DynamicCache

        lm = self._lm
        processors = self._logits_processors()
        generator = None
        if self._seed is not None:
            generator = torch.Generator(device=lm.device).manual_seed(self._seed)
        ids = torch.tensor([self._prompt_ids], device=lm.device)
        all_ids = ids
        cache = DynamicCache()
        self.finish_reason = "length"
        for _ in range(self._max_new_tokens):
            if self._cancel is not None and self._cancel.is_set():
                self.finish_reason = "cancelled"
                return
            with torch.inference_mode():
                out = lm.model(input_ids=ids, cache=cache, use_cache=True)  # fills cache in place
                logits = processors(all_ids, out.logits[:, -1, :].float())
                if self._temperature > 0:
                    probs = torch.softmax(logits, dim=-1)
                    token = torch.multinomial(probs, 1, generator=generator)
                else:
                    token = logits.argmax(dim=-1, keepdim=True)
            token_id = int(token[0, 0])
            if token_id in lm._stop_ids:
                self.finish_reason = "stop"
                return
            self.output_tokens += 1
            ids = token
            all_ids = torch.cat([all_ids, token], dim=1)
            yield token_id

    def _logits_processors(self):  # -> transformers.LogitsProcessorList
        from transformers import (
            LogitsProcessorList,
            RepetitionPenaltyLogitsProcessor,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )
        from .transformers_lm import REPETITION_PENALTY, TOP_K, TOP_P

        processors = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(REPETITION_PENALTY)])
        if self._temperature > 0:
            processors.extend(
                [
                    TemperatureLogitsWarper(self._temperature),
                    TopKLogitsWarper(TOP_K),
                    TopPLogitsWarper(TOP_P),
                ]
            )
        return processors
