"""Continuous batching for one shared ``TransformersLM``.

Every unit's LM stage calls ``generate_stream`` as before; instead of running
its own token loop, each request becomes a row of one batch that a single
scheduler thread advances with one forward pass per step. Rows join and leave
between steps: a new request is prefilled on its own (reusing its
conversation's ``PrefixCache``), then merged into the batch's KV cache; a row
that stops, reaches its limit, is cancelled or abandoned is split off, and its
KV cache goes back to its conversation. Output reaches a request only through
its own stream, so sessions stay isolated and the LM stage's generation
fencing is untouched. Rows of different lengths are left-padded in the batched
cache and masked; each row keeps its own positions, sampler and seed.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.errors import PromptTooLongError

from ._decode import text_pieces, tokenizer_decode
from ._transformers_stream import PrefixCache, sampling_processors

if TYPE_CHECKING:
    from .transformers_lm import TransformersLM

logger = logging.getLogger(__name__)

_END = object()
IDLE_WAIT_S = 0.5


class SchedulerStoppedError(RuntimeError):
    """The batch scheduler is closed or died: no more tokens will come."""


@dataclass
class _Row:
    """One request: its prompt, sampler, output queue and, once running, its place in the batch."""

    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float
    cancel: Any
    seed: int | None
    prefix: PrefixCache | None
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    abandoned: bool = False  # the reader went away without cancelling
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None
    fed: list[int] = field(default_factory=list)  # tokens the row's KV cache holds
    pending: int = -1  # sampled, not yet fed
    all_ids: Any = None  # prompt + output, for the repetition penalty
    processors: Any = None
    generator: Any = None

    def should_stop(self) -> bool:
        return self.abandoned or (self.cancel is not None and self.cancel.is_set())


class BatchedStream:
    """The same interface as ``LMStream``: iterate for text pieces, then read the counts.

    The request is handed to the scheduler when iteration starts; leaving the
    loop early (or ``cancel.set()``) takes the row out of the batch at the next step.
    """

    def __init__(self, owner: BatchedLM, row: _Row) -> None:
        self._owner = owner
        self._row = row

    input_tokens = property(lambda self: self._row.input_tokens)
    cached_tokens = property(lambda self: self._row.cached_tokens)
    output_tokens = property(lambda self: self._row.output_tokens)
    finish_reason = property(lambda self: self._row.finish_reason)

    def __iter__(self) -> Iterator[str]:
        row = self._row
        self._owner.submit(row)
        try:
            yield from text_pieces(self._tokens(row), tokenizer_decode(self._owner.lm.tokenizer))
        finally:
            row.abandoned = True  # harmless once finished; stops the row if the reader left early

    def _tokens(self, row: _Row) -> Iterator[int]:
        while (item := self._next(row)) is not _END:
            yield item

    def _next(self, row: _Row) -> Any:
        while True:
            try:
                item = row.out.get(timeout=IDLE_WAIT_S)
            except queue.Empty:
                if not self._owner.running:
                    raise SchedulerStoppedError("the LM batch scheduler stopped") from None
                continue
            if isinstance(item, BaseException):
                raise item
            return item


class BatchedLM:
    """A ``LanguageModel`` whose requests share one forward pass per step.

    ``max_batch`` bounds the rows decoded together; further requests wait for a
    free row. ``stats()`` reports steps, tokens and the mean batch size.
    """

    def __init__(self, lm: TransformersLM, max_batch: int = 16) -> None:
        self.lm = lm
        self.context_length = lm.context_length
        self.max_batch = max(1, max_batch)
        self._waiting: queue.SimpleQueue[_Row] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._rows: list[_Row] = []
        self._cache: Any = None  # batched DynamicCache, rows left-padded to the longest
        self._pads: list[int] = []
        self._steps = 0
        self._tokens = 0
        self._row_steps = 0
        self._thread = threading.Thread(target=self._run, name="lm-batch", daemon=True)
        self._thread.start()
        logger.info("LM batch scheduler on %s, up to %d rows per step", lm.device, self.max_batch)

    # --- the LanguageModel interface -------------------------------------------

    def count_tokens(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> int:
        return self.lm.count_tokens(messages, *args, **kwargs)

    def new_prefix_cache(self) -> PrefixCache:
        return PrefixCache()

    def generate_stream(
        self,
        messages: list[dict[str, str]],
        max_new_tokens: int,
        temperature: float = 0.8,
        cancel: Any = None,
        seed: int | None = None,
        prefix: PrefixCache | None = None,
        **options: Any,
    ) -> Any:
        """A ``BatchedStream``; a request with tools (constrained decoding) runs unbatched on the model itself."""
        if options.get("tools"):
            return self.lm.generate_stream(
                messages, max_new_tokens, temperature, cancel, seed=seed, prefix=prefix, **options
            )
        prompt_ids = self.lm.encode_chat(messages)
        room = self.context_length - len(prompt_ids)
        if room <= 0:
            raise PromptTooLongError(f"prompt has {len(prompt_ids)} tokens, context is {self.context_length}")
        row = _Row(
            prompt_ids=prompt_ids,
            max_new_tokens=min(max_new_tokens, room),
            temperature=temperature,
            cancel=cancel,
            seed=seed,
            prefix=prefix,
            input_tokens=len(prompt_ids),
        )
        return BatchedStream(self, row)

    # --- lifecycle --------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._closed.is_set()

    def submit(self, row: _Row) -> None:
        if not self.running:
            raise SchedulerStoppedError("the LM batch scheduler is closed")
        self._waiting.put(row)
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout)

    def stats(self) -> dict[str, float]:
        return {
            "steps": self._steps,
            "tokens": self._tokens,
            "mean_batch": self._row_steps / self._steps if self._steps else 0.0,
        }

    # --- the scheduler thread ---------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closed.is_set():
                self._admit()
                if not self._rows:
                    self._wake.wait(IDLE_WAIT_S)
                    self._wake.clear()
                    continue
                self._drop_stopped()
                if self._rows:
                    self._step()
        finally:
            error = SchedulerStoppedError("the LM batch scheduler stopped")
            for row in self._rows:
                row.out.put(error)
            while not self._waiting.empty():
                self._waiting.get_nowait().out.put(error)

    def _admit(self) -> None:
        """Prefills waiting requests one by one and merges each into the batch."""
        while len(self._rows) < self.max_batch and not self._waiting.empty():
            row = self._waiting.get_nowait()
            if row.should_stop():
                self._finish(row, "cancelled")
                continue
            try:
                cache = self._prefill(row)
            except Exception as exc:
                logger.exception("LM prefill failed")
                row.out.put(exc)
                continue
            if row.finish_reason is None:
                self._join(row, cache)
            elif row.prefix is not None and cache.get_seq_length() == len(row.fed):
                row.prefix.keep(cache, row.fed)

    def _prefill(self, row: _Row) -> Any:
        import torch
        from transformers import DynamicCache

        lm = self.lm
        row.processors = sampling_processors(row.temperature)
        if row.seed is not None:
            row.generator = torch.Generator(device=lm.device).manual_seed(row.seed)
        row.all_ids = torch.tensor([row.prompt_ids], device=lm.device)
        cache, cached = row.prefix.take(row.prompt_ids) if row.prefix is not None else (DynamicCache(), 0)
        row.cached_tokens = cached
        row.fed = list(row.prompt_ids)
        with torch.inference_mode():
            out = lm.model(input_ids=row.all_ids[:, cached:], cache=cache, use_cache=True)
            token = _sample(row, out.logits[:, -1, :])
        self._accept(row, token)
        return cache

    def _accept(self, row: _Row, token: int) -> None:
        """Emits a sampled token or finishes the row (stop token, limit)."""
        if token in self.lm.stop_ids:
            self._finish(row, "stop")
            return
        row.output_tokens += 1
        self._tokens += 1
        row.out.put(token)
        if row.output_tokens >= row.max_new_tokens:
            self._finish(row, "length")
            return
        row.pending = token
        import torch

        row.all_ids = torch.cat([row.all_ids, torch.tensor([[token]], device=row.all_ids.device)], dim=1)

    @staticmethod
    def _finish(row: _Row, reason: str) -> None:
        row.finish_reason = reason
        row.out.put(_END)

    def _step(self) -> None:
        """One forward pass for every row; each samples its next token."""
        import torch

        lm = self.lm
        width = self._cache.get_seq_length()
        ids = torch.tensor([[row.pending] for row in self._rows], device=lm.device)
        positions = torch.tensor([[width - pad] for pad in self._pads], device=lm.device)
        mask = torch.ones((len(self._rows), width + 1), dtype=torch.long, device=lm.device)
        for i, pad in enumerate(self._pads):
            mask[i, :pad] = 0
        for row in self._rows:
            row.fed.append(row.pending)
        try:
            with torch.inference_mode():
                out = lm.model(
                    input_ids=ids, attention_mask=mask, position_ids=positions, cache=self._cache, use_cache=True
                )
                tokens = [_sample(row, out.logits[i : i + 1, -1, :]) for i, row in enumerate(self._rows)]
        except Exception as exc:
            logger.exception("LM batch step failed; failing its %d row(s)", len(self._rows))
            for row in self._rows:
                row.out.put(exc)
            self._rows, self._pads, self._cache = [], [], None
            return
        self._steps += 1
        self._row_steps += len(self._rows)
        for row, token in zip(self._rows, tokens):
            self._accept(row, token)
        self._leave([i for i, row in enumerate(self._rows) if row.finish_reason is not None])

    def _drop_stopped(self) -> None:
        stopped = [i for i, row in enumerate(self._rows) if row.should_stop()]
        for i in stopped:
            self._finish(self._rows[i], "cancelled")
        self._leave(stopped)

    # --- the batched KV cache ---------------------------------------------------

    def _join(self, row: _Row, cache: Any) -> None:
        """Merges a prefilled row's cache into the batch, left-padding the shorter side."""
        from transformers import DynamicCache

        length = cache.get_seq_length()
        if self._cache is None:
            self._rows, self._pads, self._cache = [row], [0], cache
            return
        width = self._cache.get_seq_length()
        new_width = max(width, length)
        layers = []
        for batch_layer, row_layer in zip(self._cache.layers, cache.layers):
            layers.append(
                (
                    _cat_padded(batch_layer.keys, new_width - width, row_layer.keys, new_width - length),
                    _cat_padded(batch_layer.values, new_width - width, row_layer.values, new_width - length),
                )
            )
        self._cache = DynamicCache(ddp_cache_data=layers)
        self._pads = [pad + new_width - width for pad in self._pads] + [new_width - length]
        self._rows.append(row)

    def _leave(self, indices: list[int]) -> None:
        """Splits finished rows off the batch; their caches go back to their conversations."""
        if not indices:
            return
        import torch
        from transformers import DynamicCache

        for i in indices:
            row, pad = self._rows[i], self._pads[i]
            if row.prefix is not None:
                own = DynamicCache(
                    ddp_cache_data=[
                        (layer.keys[i : i + 1, :, pad:].clone(), layer.values[i : i + 1, :, pad:].clone())
                        for layer in self._cache.layers
                    ]
                )
                if own.get_seq_length() == len(row.fed):
                    row.prefix.keep(own, row.fed)
        gone = set(indices)
        keep = [i for i in range(len(self._rows)) if i not in gone]
        if not keep:
            self._rows, self._pads, self._cache = [], [], None
            return
        trim = min(self._pads[i] for i in keep)  # padding every remaining row has is dead weight
        index = torch.tensor(keep, device=self._cache.layers[0].keys.device)
        self._cache = DynamicCache(
            ddp_cache_data=[
                (layer.keys.index_select(0, index)[:, :, trim:], layer.values.index_select(0, index)[:, :, trim:])
                for layer in self._cache.layers
            ]
        )
        self._rows = [self._rows[i] for i in keep]
        self._pads = [self._pads[i] - trim for i in keep]


def _cat_padded(batch: Any, batch_pad: int, row: Any, row_pad: int) -> Any:
    import torch
    import torch.nn.functional as F

    return torch.cat([F.pad(batch, (0, 0, batch_pad, 0)), F.pad(row, (0, 0, row_pad, 0))], dim=0)


def _sample(row: _Row, logits: Any) -> int:
    """The row's next token, with the same processors and sampler as an unbatched ``LMStream``."""
    import torch

    scores = row.processors(row.all_ids, logits.float())
    if row.temperature > 0:
        token = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=row.generator)
    else:
        token = scores.argmax(dim=-1, keepdim=True)
    return int(token[0, 0])


__all__ = ["BatchedLM", "BatchedStream", "SchedulerStoppedError"]
