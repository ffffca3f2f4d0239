"""Domain exceptions of the pipelines package."""

from __future__ import annotations


class PipelineErrorBase(Exception):
    """Base of the pipeline's own exceptions."""


class ModelLoadError(PipelineErrorBase):
    """A model is missing or failed to load."""
