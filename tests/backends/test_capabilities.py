"""What each language model may do besides generating is declared in pipelines/interfaces.py and found with
isinstance, not probed with getattr: the engines that keep a conversation's cache and read ahead say so."""

from __future__ import annotations

from pipelines.backends.batched_lm import BatchedLM
from pipelines.backends.llama_cpp_lm import LlamaCppLM
from pipelines.backends.openai_lm import OpenAIChatLM
from pipelines.backends.transformers_lm import TransformersLM
from pipelines.interfaces import KeepsPrefixCache, ReadsAhead


def test_each_engine_declares_the_abilities_it_has_and_no_other():
    assert issubclass(LlamaCppLM, ReadsAhead) and issubclass(LlamaCppLM, KeepsPrefixCache)
    for engine in (TransformersLM, BatchedLM):
        assert issubclass(engine, KeepsPrefixCache) and not issubclass(engine, ReadsAhead), engine
    assert not issubclass(OpenAIChatLM, KeepsPrefixCache)  # the serving engine keeps its own cache
