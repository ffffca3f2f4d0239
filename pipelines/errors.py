"""Domain exceptions of the pipelines package."""

from __future__ import annotations


class PipelineErrorBase(Exception):
    """Base of the pipeline's own exceptions."""


class ModelLoadError(PipelineErrorBase):
    """A model is missing or failed to load."""


class PromptTooLongError(ValueError):
    """The prompt leaves no room in the context window for an answer."""


class ToolDefinitionError(PipelineErrorBase, ValueError):
    """A tool definition or tool choice that cannot be used; ``param`` names where it is wrong."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
