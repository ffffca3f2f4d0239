"""Domain exceptions of the pipelines package."""

from __future__ import annotations


class PipelineErrorBase(Exception):
    """Base of the pipeline's own exceptions."""


class ModelLoadError(PipelineErrorBase):
    """A model is missing or failed to load."""


class UnknownVoice(PipelineErrorBase):
    """The session asked for a voice that is not configured."""


class ReleaseTimeout(PipelineErrorBase):
    """A unit did not drain in time and was quarantined."""
