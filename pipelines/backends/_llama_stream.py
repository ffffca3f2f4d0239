"""One generation on llama.cpp: a context's KV cache reused, tokens sampled and paced on the cores.

The engine (``llama_cpp_lm.LlamaCppLM``) lends the stream a context for as long as it runs; the stream
keeps the prompt's prefix the context already holds, samples (a GBNF grammar for calls), and runs each
step on the threads ``pipelines.cpu`` chooses.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol

from pipelines import cpu
from pipelines.interfaces import Cancel

from ._decode import text_pieces
from ._generation import REPETITION_PENALTY, TOP_K, TOP_P, Generation, shared_prefix

logger = logging.getLogger(__name__)


class ContextPool(Protocol):
    """What a stream needs of its engine: a context for a conversation (``prefix``, a ``LlamaPrefix``) and
    back, and the threads a step may take."""

    threads: int
    adaptive_threads: bool

    def acquire(self, prefix: Any) -> Any: ...

    def release(self, context: Any, prefix: Any) -> None: ...


class LlamaCppStream(Generation):
    """Iterate once for text pieces; then read the counts (``Generation``)."""

    def __init__(
        self,
        lm: ContextPool,
        prompt_ids: list[int],
        max_new_tokens: int,
        temperature: float,
        cancel: Cancel | None,
        seed: int | None,
        prefix: Any,
        grammar: str | None = None,
        first: str | None = None,
    ) -> None:
        """``grammar`` (GBNF) holds every token, greedily; ``first`` only the first one."""
        super().__init__(prompt_ids, max_new_tokens, cancel)
        self._lm = lm
        self._grammar = grammar
        self._first = first
        self._temperature = temperature
        self._seed = seed
        self._prefix = prefix

    def __iter__(self) -> Generator[str, None, None]:
        if self._cancelled():
            self.finish_reason = "cancelled"
            return
        context = self._lm.acquire(self._prefix)
        try:
            yield from self._pieces(context)
        finally:
            self._lm.release(context, self._prefix)

    def _reuse(self, context: Any) -> int:
        """Keeps the KV cache of the longest prefix this prompt shares with the context's last one."""
        common = shared_prefix(list(context._input_ids), self._prompt_ids)
        if common > 0 and context._ctx.kv_cache_seq_rm(-1, common, -1):
            context.n_tokens = common
            return common
        context.reset()  # sliding-window caches cannot be cut: the prompt is computed in full
        return 0

    def _pieces(self, context: Any) -> Iterator[str]:
        import llama_cpp

        self.cached_tokens = self._reuse(context)
        feed = self._prompt_ids[self.cached_tokens :]
        logger.debug("prompt: %d tokens, %d cached", len(self._prompt_ids), self.cached_tokens)
        if self._seed is not None:
            context.set_seed(self._seed)
        else:
            context.set_seed(llama_cpp.LLAMA_DEFAULT_SEED)
        tokens = self._tokens(context, feed)

        def decode(ids: list[int]) -> str:
            # special=True keeps markup tokens such as <tool_call>; end-of-turn tokens never get here.
            return context.detokenize(ids, prev_tokens=self._prompt_ids, special=True).decode("utf-8", errors="replace")

        vocab = context._model.vocab

        def ends(token: int) -> bool:
            return llama_cpp.llama_vocab_is_eog(vocab, token)

        try:
            yield from text_pieces(self._accepted(tokens, ends), decode)
        finally:
            tokens.close()

    def _tokens(self, context: Any, feed: list[int]) -> Generator[int, None, None]:
        """The sampled tokens, the first one under ``first`` if set: a generation of one token under that
        grammar, then one without it from there (the context keeps the prompt's KV cache between them)."""
        from llama_cpp import LlamaGrammar

        if self._grammar is not None and self._first is None:
            quick = greedy_under_grammar(context, feed, self._grammar)
            try:
                yield from self._paced(context, quick)
            finally:
                quick.close()  # its grammar sampler is freed now, not when the generator is collected
            return
        if self._grammar is None:
            sampling: dict[str, Any] = {"temp": max(0.0, self._temperature), "repeat_penalty": REPETITION_PENALTY}
        else:  # a call's arguments are data copied from the conversation: greedy, and no penalty for copying
            sampling = {"temp": 0.0, "repeat_penalty": 1.0, "grammar": LlamaGrammar.from_string(self._grammar)}
        options = {"top_k": TOP_K, "top_p": TOP_P, "min_p": 0.0, "reset": False, **sampling}
        if self._first is not None:
            opening = context.generate(feed, **options, grammar=LlamaGrammar.from_string(self._first))
            paced = self._paced(context, opening)
            try:
                token = next(paced)
            finally:
                paced.close()
                opening.close()
            yield token
            feed = [token]
        tokens = context.generate(feed, **options)
        try:
            yield from self._paced(context, tokens)
        finally:
            tokens.close()

    def writes(self, continuations: Sequence[list[int]]) -> bool:
        """Whether greedy decoding after the prompt would write one of ``continuations``, token for token:
        each checked in one evaluation of its tokens (the most likely token after each position), not
        generated a token at a time. A grammar allows what it allows, so where the model's own choice is
        a text the grammar takes, greedy decoding under the grammar writes it too."""
        if self._cancelled():
            return False
        context = self._lm.acquire(self._prefix)
        try:
            prompt = self._prompt_ids
            self.cached_tokens = self._reuse(context)
            feed = prompt[self.cached_tokens : -1]
            if feed:
                self.run_on_share(context, functools.partial(context.eval, feed))
            return any(
                self._greedy_path(context, prompt, tokens)
                for tokens in continuations
                if 0 < len(tokens) < context.n_batch and len(prompt) + len(tokens) < context.n_ctx()
            )
        finally:
            self._lm.release(context, self._prefix)

    def _greedy_path(self, context: Any, prompt: list[int], tokens: list[int]) -> bool:
        """Evaluates the prompt's last token and ``tokens`` but the last in one batch, with the logits of
        each position; the context then holds the prompt again."""
        import numpy as np

        batch = [prompt[-1], *tokens[:-1]]
        start = len(prompt) - 1
        context._ctx.kv_cache_seq_rm(-1, start, -1)
        context.n_tokens = start
        context._batch.set_batch(batch=batch, n_past=start, logits_all=True)
        self.run_on_share(context, functools.partial(context._ctx.decode, context._batch))
        context.input_ids[start : start + len(batch)] = batch
        context.n_tokens = start + len(batch)
        logits = np.ctypeslib.as_array(context._ctx.get_logits(), shape=(len(batch), context.n_vocab()))
        picks = logits.argmax(axis=1).tolist()
        context._ctx.kv_cache_seq_rm(-1, len(prompt), -1)
        context.n_tokens = len(prompt)
        if picks[:-1] != tokens[:-1]:
            return False
        if picks[-1] == tokens[-1]:
            return True
        # The last token may be written merged with what follows it ('"}}' where the text ends at '"}').
        last = context.detokenize([tokens[-1]], special=True)
        return context.detokenize([picks[-1]], special=True).startswith(last)

    def run_on_share(self, context: Any, step: Callable[[], None]) -> None:
        """One step (a prompt's evaluation) on the threads :mod:`pipelines.cpu` chooses."""
        share = cpu.current()
        with share.core():
            if not (self._lm.adaptive_threads and share.adaptive and share.share == self._lm.threads):
                step()
                return
            threads = share.lm_threads()
            context._ctx.set_n_threads(threads, threads)
            try:
                step()
            finally:
                context._ctx.set_n_threads(self._lm.threads, self._lm.threads)

    def _paced(self, context: Any, tokens: Iterator[int]) -> Generator[int, None, None]:
        """``tokens``, each step on the threads :mod:`pipelines.cpu` chooses (every core while the LM is
        the only stage at work), and each decode's time told back to it. The prompt is the first step."""
        share = cpu.current()
        if not (self._lm.adaptive_threads and share.adaptive and share.share == self._lm.threads):
            yield from cpu.stepwise(tokens)
            return
        threads = self._lm.threads
        first = True
        try:
            while True:
                with share.core():
                    wanted = share.lm_threads()
                    if wanted != threads:
                        context._ctx.set_n_threads(wanted, wanted)
                        threads = wanted
                    started = time.perf_counter()
                    try:
                        token = next(tokens)
                    except StopIteration:
                        return
                    if not first:
                        share.observe(threads, time.perf_counter() - started)
                first = False
                yield token
        finally:
            if threads != self._lm.threads:
                context._ctx.set_n_threads(self._lm.threads, self._lm.threads)


def greedy_under_grammar(context: Any, feed: list[int], grammar: str) -> Generator[int, None, None]:
    """Greedy decoding held to ``grammar`` (GBNF), as llama.cpp's own tools sample: the most likely token is
    asked of the grammar alone, and only where the grammar refuses it is every token of the vocabulary
    weighed against it. llama-cpp-python's sampler chain weighs all of them at every step (about 13 ms a
    token with a call's grammar and Qwen2.5's 151,936 tokens, half again a step's time on two cores)."""
    import ctypes

    import llama_cpp
    import numpy as np

    n_vocab = context.n_vocab()
    sampler = llama_cpp.llama_sampler_init_grammar(context._model.vocab, grammar.encode(), b"root")
    one = (llama_cpp.llama_token_data * 1)()
    every = None  # the whole vocabulary, made when the grammar first refuses the model's choice
    try:
        tokens = feed
        while True:
            context.eval(tokens)
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(context.ctx, -1), shape=(n_vocab,))
            token = int(logits.argmax())
            one[0].id, one[0].logit, one[0].p = token, float(logits[token]), 0.0
            chosen = llama_cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(chosen))
            if not np.isfinite(one[0].logit):
                if every is None:
                    every = (llama_cpp.llama_token_data * n_vocab)()
                    table = np.ctypeslib.as_array(every)
                    table["id"] = np.arange(n_vocab, dtype=np.int32)
                table["logit"] = logits
                table["p"] = 0.0
                weighed = llama_cpp.llama_token_data_array(data=every, size=n_vocab, selected=-1, sorted=False)
                llama_cpp.llama_sampler_apply(sampler, ctypes.byref(weighed))
                allowed = table["logit"]
                token = int(allowed.argmax())
                if not np.isfinite(allowed[token]):
                    return  # nothing the grammar allows (it cannot happen with a grammar that parses)
            llama_cpp.llama_sampler_accept(sampler, token)
            yield token
            tokens = [token]
    finally:
        llama_cpp.llama_sampler_free(sampler)
