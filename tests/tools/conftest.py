"""SmolLM2-135M on the transformers engine (xgrammar-constrained calls), loaded once for the tool tests."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def lm():
    from pipelines.backends.transformers_lm import TransformersLM

    return TransformersLM()
