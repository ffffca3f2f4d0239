"""Token ids to text as a generation streams: the one decode loop of the LM engines."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any


def text_pieces(tokens: Iterable[int], decode: Callable[[list[int]], str]) -> Iterator[str]:
    """The text each new token adds.

    The whole generation is decoded each time (how a token reads depends on its neighbours);
    text that ends inside a multi-byte character waits for the token that completes it.
    """
    generated: list[int] = []
    decoded = ""
    for token in tokens:
        generated.append(token)
        text = decode(generated)
        if text.endswith("\ufffd"):
            continue  # a multi-byte character is split across tokens
        if len(text) > len(decoded):
            yield text[len(decoded) :]
            decoded = text


def tokenizer_decode(tokenizer: Any) -> Callable[[list[int]], str]:
    """A transformers tokenizer's decode as a stream reads it: special tokens left out, spaces as generated."""
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
