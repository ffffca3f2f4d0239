"""Stored prompts, as plain Python: one version's text, the version a reference picks, the variables filled in.

The rows are ``realtime.prompt_models`` (edited in the admin); the wire shape of a reference
(``prompt: {id, version, variables}``) is parsed in ``realtime.protocol.events``; ``realtime.protocol.session``
applies it. Nothing here imports Django or the wire format.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class StoredPrompt:
    """One version of a stored prompt: its instructions template and its variables' defaults."""

    id: str
    version: str
    text: str
    defaults: Mapping[str, str] = field(default_factory=dict)

    def variables(self) -> set[str]:
        return set(PLACEHOLDER.findall(self.text))


class PromptError(Exception):
    """A reference that cannot be applied: ``field`` is the part of it at fault ("id", "version",
    "variables.NAME"), ``code`` the API's error code."""

    def __init__(self, code: str, message: str, field_name: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field_name


# (prompt id, version or None for the newest) -> that version; raises PromptError.
PromptLookup = Callable[[str, "str | None"], StoredPrompt]


def pick(versions: Mapping[str, StoredPrompt], prompt_id: str, version: str | None) -> StoredPrompt:
    """The version asked for (None: the newest) among a prompt's versions."""
    if not versions:
        raise PromptError("invalid_value", f"Prompt with id '{prompt_id[:100]}' not found.", "id")
    if version is None:
        return versions[max(versions, key=_order)]
    if version not in versions:
        raise PromptError(
            "invalid_value",
            f"Prompt '{prompt_id[:100]}' has no version '{version[:20]}'. Versions: "
            + ", ".join(sorted(versions, key=_order))
            + ".",
            "version",
        )
    return versions[version]


def fill(stored: StoredPrompt, given: Mapping[str, str]) -> str:
    """The version's text with each ``{{name}}`` replaced: the client's value, else the version's default."""
    wanted = stored.variables()
    unknown = sorted(set(given) - wanted)
    if unknown:
        raise PromptError(
            "invalid_value",
            f"Prompt '{stored.id}' version {stored.version} has no variable "
            + ", ".join(repr(name) for name in unknown)
            + ".",
            f"variables.{unknown[0]}",
        )
    values = {**stored.defaults, **given}
    missing = sorted(wanted - set(values))
    if missing:
        raise PromptError(
            "missing_required_parameter",
            f"Missing prompt variables: {', '.join(missing)} (prompt "
            f"'{stored.id}' version {stored.version} has no default for them).",
            f"variables.{missing[0]}",
        )
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], stored.text)


def _order(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (0, version)
