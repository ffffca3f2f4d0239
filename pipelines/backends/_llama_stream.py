"""One generation on llama.cpp: a context's KV cache reused, tokens sampled and paced on the cores.

The engine (``llama_cpp_lm.LlamaCppLM``) lends the stream a context for as long as it runs; the stream
keeps the prompt's prefix the context already holds, samples (a GBNF grammar for calls), and runs each
step on the threads ``pipelines.cpu`` chooses.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from pipelines import cpu
from pipelines.interfaces import Cancel

from ._decode import text_pieces
from ._generation import REPETITION_PENALTY, TOP_K, TOP_P, Generation
from ._llama_adapter import (
    decode_every_position,
    forget_from,
    position_logits,
    reuse_prefix,
    set_threads,
    vocab,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ContextPool(Protocol):
    """What a stream needs of its engine: a context for a conversation (``prefix``, a ``ConversationCache``) and
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

    def _pieces(self, context: Any) -> Iterator[str]:
        import llama_cpp

        self.cached_tokens = reuse_prefix(context, self._prompt_ids)
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

        words = vocab(context)

        def ends(token: int) -> bool:
            return llama_cpp.llama_vocab_is_eog(words, token)

        try:
            yield from text_pieces(self._accepted(tokens, ends), decode)
        finally:
            tokens.close()

    def _tokens(self, context: Any, feed: list[int]) -> Generator[int, None, None]:
        """The sampled tokens, the first one under ``first`` if set: a generation of one token under that
        grammar, then one without it from there (the context keeps the prompt's KV cache between them)."""
        from llama_cpp import LlamaGrammar

        if self._grammar is not None and self._first is None:
            quick = GreedyUnderGrammar(context, feed, self._grammar)
            try:
                yield from self._paced(context, quick)
            finally:
                quick.close()
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
            self.cached_tokens = reuse_prefix(context, prompt)
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
        batch = [prompt[-1], *tokens[:-1]]
        start = len(prompt) - 1
        forget_from(context, start)
        context.n_tokens = start
        self.run_on_share(context, functools.partial(decode_every_position, context, batch, start))
        context.input_ids[start : start + len(batch)] = batch
        context.n_tokens = start + len(batch)
        picks = position_logits(context, len(batch)).argmax(axis=1).tolist()
        forget_from(context, len(prompt))
        context.n_tokens = len(prompt)
        if picks[:-1] != tokens[:-1]:
            return False
        if picks[-1] == tokens[-1]:
            return True
        # The last token may be written merged with what follows it ('"}}' where the text ends at '"}').
        last = context.detokenize([tokens[-1]], special=True)
        return context.detokenize([picks[-1]], special=True).startswith(last)

    def run_on_share(self, context: Any, step: Callable[[], T]) -> T:
        """One step (a prompt's evaluation) on the threads :mod:`pipelines.cpu` chooses."""
        share = cpu.current()
        with share.core():
            if not (self._lm.adaptive_threads and share.adaptive and share.share == self._lm.threads):
                return step()
            set_threads(context, share.lm_threads())
            try:
                return step()
            finally:
                set_threads(context, self._lm.threads)

    def _paced(self, context: Any, tokens: Iterator[int]) -> Generator[int, None, None]:
        """``tokens``, each step on the threads :mod:`pipelines.cpu` chooses (every core while the LM is
        the only stage at work), and each decode's time told back to it. The prompt is the first step; a
        token written ahead (``GreedyUnderGrammar.evaluations`` unchanged) is no step."""
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
                        set_threads(context, wanted)
                        threads = wanted
                    started = time.perf_counter()
                    before = getattr(tokens, "evaluations", None)
                    try:
                        token = next(tokens)
                    except StopIteration:
                        return
                    stepped = before is None or getattr(tokens, "evaluations", None) != before
                    if not first and stepped:
                        share.observe(threads, time.perf_counter() - started)
                first = first and not stepped
                yield token
        finally:
            if threads != self._lm.threads:
                set_threads(context, self._lm.threads)


# A call's JSON as the chat templates show it (``json.dumps``): where the grammar allows whitespace but does not
# require it, a space after ":" and ",", and none elsewhere.
SPACED_AFTER = frozenset(b":,")
WHITESPACE = frozenset(b" \t\n\r")
MAX_FORCED_BYTES = 256


def _word_byte(byte: int) -> bool:
    return chr(byte).isalnum()


class _ByteTokens:
    """The tokens of a vocabulary that are one byte each (``ids``, ``byte_of``), and an end-of-generation token:
    what ``GreedyUnderGrammar`` asks a grammar about to find the bytes it allows next. ``complete`` is False
    where some printable ASCII byte has no token of its own (text is then never written ahead)."""

    def __init__(self, context: Any) -> None:
        import llama_cpp
        import numpy as np

        words = vocab(context)
        token_of: dict[int, int] = {}
        piece = ctypes.create_string_buffer(8)
        for token in range(context.n_vocab()):
            if llama_cpp.llama_vocab_is_control(words, token) or llama_cpp.llama_vocab_is_eog(words, token):
                continue
            if llama_cpp.llama_token_to_piece(words, token, piece, len(piece), 0, False) == 1:
                token_of.setdefault(piece.raw[0], token)
        end = llama_cpp.llama_vocab_eot(words)
        self.end = end if end >= 0 else llama_cpp.llama_vocab_eos(words)
        self.token_of = token_of
        self.byte_of = {token: byte for byte, token in token_of.items()}
        self.ids = np.asarray([*self.byte_of, self.end], dtype=np.int32)
        self.complete = self.end >= 0 and all(byte in self.token_of for byte in [*range(0x20, 0x7F), 0x0A])


_BYTE_TOKENS: dict[str, _ByteTokens] = {}
_BYTE_TOKENS_LOCK = threading.Lock()


def byte_tokens(context: Any) -> _ByteTokens:
    """``_ByteTokens`` of the context's model, found once per model file (a pass over its vocabulary: a
    quarter of a second for Qwen2.5's, so the engine asks when it loads the model)."""
    with _BYTE_TOKENS_LOCK:
        found = _BYTE_TOKENS.get(context.model_path)
        if found is None:
            found = _BYTE_TOKENS[context.model_path] = _ByteTokens(context)
        return found


class GreedyUnderGrammar:
    """Greedy decoding held to ``grammar`` (GBNF, a call's JSON), as llama.cpp's own tools sample, with the text
    the grammar forces written ahead (jump-forward decoding).

    * The most likely token is asked of the grammar alone, and only where the grammar refuses it is every
      token of the vocabulary weighed against it. llama-cpp-python's sampler chain weighs all of them at
      every step, which with a large vocabulary costs about half again a step's time (docs/benchmarks.md,
      "Function calling with the default models").
    * Where the grammar allows one byte only, that byte is written without asking the model, and so on:
      ``{"name": "``, the rest of a name once it is the only one it can be, ``", "arguments": {"``, a required
      key. Such a run is tokenized and evaluated in one batch with the model's last token instead of being
      decoded a token at a time. Whitespace the grammar allows but does not require is written as the chat
      templates write JSON (``SPACED_AFTER``). A run is not written where it would split a word the model
      is writing (it starts in the middle of one, or ends with the start of one): the model writes those.
    * Once the grammar may end and allows nothing but whitespace, the call is done: the stream ends with the
      end-of-generation token, without another evaluation.

    ``evaluations`` counts the model's evaluations, for ``LlamaCppStream._paced`` (a token written ahead
    costs none)."""

    def __init__(self, context: Any, feed: list[int], grammar: str) -> None:
        self.evaluations = 0
        self._tokens = self._generate(context, feed, grammar)

    def __iter__(self) -> GreedyUnderGrammar:
        return self

    def __next__(self) -> int:
        return next(self._tokens)

    def close(self) -> None:
        self._tokens.close()  # its grammar sampler is freed now, not when the generator is collected

    def _generate(self, context: Any, feed: list[int], grammar: str) -> Generator[int, None, None]:
        import llama_cpp
        import numpy as np

        n_vocab = context.n_vocab()
        words = vocab(context)
        sampler = llama_cpp.llama_sampler_init_grammar(words, grammar.encode(), b"root")
        if not sampler:
            return  # a grammar llama.cpp cannot parse (it logged why)
        bytes_ = byte_tokens(context)
        one = (llama_cpp.llama_token_data * 1)()
        every = None  # the whole vocabulary, made when the grammar first refuses the model's choice
        written = context.detokenize(feed[-1:], special=True) if feed else b""
        try:
            tokens = feed
            while True:
                ahead, done = self._forced(context, sampler, bytes_, written)
                yield from ahead  # each the grammar's only choice: evaluated with the next step, not decoded
                if done:
                    yield bytes_.end
                    return
                tokens = [*tokens, *ahead]
                context.eval(tokens)
                self.evaluations += 1
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
                if llama_cpp.llama_vocab_is_eog(words, token):
                    return
                written = context.detokenize([token], special=True)
                tokens = [token]
        finally:
            llama_cpp.llama_sampler_free(sampler)

    @staticmethod
    def _forced(context: Any, sampler: Any, bytes_: _ByteTokens, written: bytes) -> tuple[list[int], bool]:
        """The tokens of the text the grammar forces next (accepted by ``sampler``), and whether the grammar is
        then done; ``written``: the text just before (the last token's)."""
        import llama_cpp

        if not bytes_.complete:
            return [], False
        probe = llama_cpp.llama_sampler_clone(sampler)
        try:
            run, done = _forced_bytes(probe, bytes_, written[-1:])
        finally:
            llama_cpp.llama_sampler_free(probe)
        if not done:
            run = _whole_words(run, written[-1:])
        if not run:
            return [], done
        ahead = context.tokenize(run, add_bos=False, special=False)
        if context.detokenize(ahead, special=True) != run:
            return [], done  # a tokenizer that changes the text (a leading space added): nothing written ahead
        for byte in run:
            llama_cpp.llama_sampler_accept(sampler, bytes_.token_of[byte])
        return ahead, done


def _forced_bytes(probe: Any, bytes_: _ByteTokens, before: bytes) -> tuple[bytes, bool]:
    """The bytes the grammar of ``probe`` allows one at a time from here (accepting them), and whether it may
    then end with nothing but whitespace left."""
    import llama_cpp
    import numpy as np

    size = len(bytes_.ids)
    candidates = (llama_cpp.llama_token_data * size)()
    table = np.ctypeslib.as_array(candidates)
    table["id"] = bytes_.ids
    run = bytearray()
    last = before[-1] if before else None
    while len(run) < MAX_FORCED_BYTES:
        table["logit"] = 0.0
        table["p"] = 0.0
        weighed = llama_cpp.llama_token_data_array(data=candidates, size=size, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(probe, ctypes.byref(weighed))
        finite = np.isfinite(table["logit"])
        ends = bool(finite[-1])
        allowed = {bytes_.byte_of[int(token)] for token in table["id"][:-1][finite[:-1]]}
        solid = allowed - WHITESPACE
        if ends:
            return bytes(run), not solid
        if len(solid) > 1 or not allowed:
            break
        if solid and len(allowed) > 1:  # optional whitespace before one byte: as json.dumps writes it
            byte = 0x20 if 0x20 in allowed and last in SPACED_AFTER else next(iter(solid))
        elif len(allowed) == 1:
            byte = next(iter(allowed))
        else:
            break  # a choice of whitespace only
        if byte >= 0x80:
            break  # a byte of a longer character: the model writes it
        llama_cpp.llama_sampler_accept(probe, bytes_.token_of[byte])
        run.append(byte)
        last = byte
    return bytes(run), False


def _whole_words(run: bytes, before: bytes) -> bytes:
    """``run`` unless it goes on with a word the model is writing, less the start of a word at its end (and a
    mark a tokenizer joins to a word's front, as the "_" of "get_weather"): tokenizers split text at words,
    so the model writes those, in the tokens it would choose."""
    if run and before and _word_byte(before[-1]) and _word_byte(run[0]):
        return b""
    end = len(run)
    while end and _word_byte(run[end - 1]):
        end -= 1
    if end and run[end - 1] not in WHITESPACE and not _word_byte(run[end - 1]):
        previous = run[end - 2 : end - 1] or before[-1:]
        if previous and _word_byte(previous[0]):
            end -= 1
    return run[:end]
