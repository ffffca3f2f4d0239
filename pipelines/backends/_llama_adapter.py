"""llama-cpp-python's internals, touched in this module alone.

A ``llama_cpp.Llama`` (a context, here) keeps what the backend needs beyond its public API in private attributes:
the tokens its KV cache holds (``_input_ids``), the C context that cuts that cache, decodes a batch and sets the
threads (``_ctx``), the batch it decodes (``_batch``) and the model and its vocabulary (``_model``). The llama
modules ask for them by these names instead, so that a version of llama-cpp-python that moves them is this
file's work; ``tests/test_architecture.py`` checks that no other module reaches them.
"""

from __future__ import annotations

from typing import Any

from ._generation import shared_prefix


def held_tokens(context: Any) -> list[int]:
    """The tokens whose KV cache ``context`` holds, in order."""
    return list(context._input_ids)


def forget_from(context: Any, position: int) -> bool:
    """Drops ``context``'s KV cache from ``position`` on (its token count is the caller's to set); False where
    llama.cpp cannot cut the cache there (a sliding-window cache)."""
    return bool(context._ctx.kv_cache_seq_rm(-1, position, -1))


def reuse_prefix(context: Any, prompt: list[int]) -> int:
    """Keeps the KV cache of the longest prefix ``prompt`` shares with the context's last prompt: the tokens kept
    (none where the cache cannot be cut, and the context is reset: the prompt is then computed in full)."""
    common = shared_prefix(held_tokens(context), prompt)
    if common > 0 and forget_from(context, common):
        context.n_tokens = common
        return common
    context.reset()
    return 0


def vocab(context: Any) -> Any:
    """The model's ``llama_vocab`` pointer, for llama.cpp's own functions (``llama_cpp.llama_vocab_is_eog``...)."""
    return context._model.vocab


def token_text(context: Any, token: int) -> str:
    """The text of one token of the vocabulary as the chat template writes it (``<|im_start|>``, ``<s>``)."""
    return str(context._model.token_get_text(token))


def set_threads(context: Any, threads: int) -> None:
    """The threads ``context`` takes for a step, for one token and for a batch alike."""
    context._ctx.set_n_threads(threads, threads)


def decode_every_position(context: Any, tokens: list[int], start: int) -> None:
    """Evaluates ``tokens`` at positions ``start`` on in one batch, keeping the logits of every position
    (``position_logits``); the context's token count is the caller's to set."""
    context._batch.set_batch(batch=tokens, n_past=start, logits_all=True)
    context._ctx.decode(context._batch)


def position_logits(context: Any, positions: int) -> Any:
    """The logits of the last batch's ``positions`` positions (``decode_every_position``): an array of
    ``positions`` rows of the vocabulary's size, a view on llama.cpp's own buffer."""
    import numpy as np

    return np.ctypeslib.as_array(context._ctx.get_logits(), shape=(positions, context.n_vocab()))
