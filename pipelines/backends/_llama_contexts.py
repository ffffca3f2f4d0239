"""The llama.cpp contexts of one model file, lent to generations one at a time, and which conversation each caches.

One ``llama_cpp.Llama`` holds one KV cache and serves one generation at a time, so the engine keeps a few of them
(made on demand, up to ``max_contexts``); their weights are memory-mapped from the same file, so the page cache
holds them once. A conversation's :class:`ConversationCache` remembers which context served its last turn: the
next turn goes back to it, and llama.cpp keeps the KV cache of the prompt they share.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class ConversationCache:
    """Which context holds one conversation's KV cache (one session, one thread), for each of its contexts' jobs:
    the conversation's own, the turn's (``for_turn``: it decides on calls from the current turn alone), and the
    answer model's (``for_answers``, where a second model answers in words)."""

    def __init__(self) -> None:
        self.context: Any = None
        self.turn: ConversationCache | None = None
        self.answer: ConversationCache | None = None

    def for_turn(self) -> ConversationCache:
        if self.turn is None:
            self.turn = ConversationCache()
        return self.turn

    def for_answers(self) -> ConversationCache:
        if self.answer is None:
            self.answer = ConversationCache()
        return self.answer


class LlamaContexts:
    """The contexts of one model: ``acquire`` one for a conversation, ``release`` it after; the threads a step may
    take (``threads``; ``adaptive_threads``: every core while nothing else computes, ``pipelines.cpu``)."""

    def __init__(
        self, make: Callable[[], Any], first: Any, max_contexts: int, threads: int, adaptive_threads: bool
    ) -> None:
        self._make_context = make
        self.threads = threads
        self.adaptive_threads = adaptive_threads
        self._lock = threading.Condition()
        self.free: list[Any] = [first]  # in the order released
        self._holders: dict[int, weakref.ref[ConversationCache]] = {}  # id(context) -> the conversation it caches
        self.max_contexts = max(1, max_contexts)
        self._made = 1
        self._making = 0  # spare contexts being made ahead (_spare_ahead)

    def acquire(self, prefix: ConversationCache | None) -> Any:
        """A context for ``prefix``'s conversation: its own if it is free, else one no live conversation holds,
        else a new one while fewer than ``max_contexts`` exist, else the one free the longest (its
        conversation reads its whole prompt again next time).

        Taking another conversation's context costs that one its cache: with two sessions on one context,
        each turn of each read its whole history again. A new context takes a few tenths of a second to make,
        so one is made ahead, off the caller's thread, whenever no spare one is left; a caller that finds none
        spare while one is being made waits for it (at most that long, once per context made) rather than take
        a context another conversation's cache is in: that one would read its whole history again, instructions
        and tools included."""
        with self._lock:
            while True:
                if prefix is not None and prefix.context in self.free and self._holder(prefix.context) is prefix:
                    context = prefix.context
                    break
                spare = next((c for c in self.free if self._holder(c) is None), None)
                if spare is not None:
                    context = spare
                    break
                if self._made < self.max_contexts:
                    self._made += 1
                    context = None
                    break
                if self._making:
                    self._lock.wait()
                    continue
                if self.free:
                    context = self.free[0]  # released the longest ago
                    break
                self._lock.wait()
            if context is not None:
                self.free.remove(context)
                self._spare_ahead()
                return context
        try:
            return self._make_context()
        except BaseException:
            with self._lock:
                self._made -= 1
                self._lock.notify_all()
            raise

    def _holder(self, context: Any) -> ConversationCache | None:
        """The live conversation whose cache ``context`` holds, if any."""
        ref = self._holders.get(id(context))
        holder = ref() if ref is not None else None
        return holder if holder is not None and holder.context is context else None

    def _spare_ahead(self) -> None:
        """With the lock held: starts making a context when none is spare and fewer than ``max_contexts`` exist."""
        if self._made >= self.max_contexts or any(self._holder(c) is None for c in self.free):
            return
        self._made += 1
        self._making += 1

        def make() -> None:
            try:
                context = self._make_context()
            except Exception:
                logger.exception("could not make a spare llama.cpp context")
                with self._lock:
                    self._made -= 1
                    self._making -= 1
                    self._lock.notify_all()  # a caller waiting for it may make one itself
                return
            with self._lock:
                self._making -= 1
                self.release(context, None)

        threading.Thread(target=make, name="llama-context", daemon=True).start()

    def release(self, context: Any, prefix: ConversationCache | None) -> None:
        """``context`` is free again; ``prefix``: the conversation whose cache it now holds."""
        with self._lock:
            if prefix is None:
                self._holders.pop(id(context), None)
            else:
                prefix.context = context
                self._holders[id(context)] = weakref.ref(prefix)
            self.free.append(context)
            self._lock.notify_all()  # the one waiting may be waiting for this conversation's own context
