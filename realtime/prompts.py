"""Stored prompts as a session or a response names them: ``prompt: {id, version, variables}``.

The prompts themselves are rows (``realtime.prompt_models``, edited in the admin); this module
knows the reference's wire shape (the SDK's ``ResponsePrompt``), picks the version and fills in
the ``{{variable}}`` placeholders. It has no Django imports: the caller hands it a lookup.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from realtime.events import EventError, check_type, optional, require

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
MAX_VARIABLES = 64


@dataclass(frozen=True)
class StoredPrompt:
    """One version of a stored prompt: its instructions template and its variables' defaults."""

    id: str
    version: str
    text: str
    defaults: Mapping[str, str] = field(default_factory=dict)

    def variables(self) -> set[str]:
        return set(PLACEHOLDER.findall(self.text))


class PromptNotFound(Exception):
    """No stored prompt has that id (``field`` "id") or that version (``field`` "version")."""

    def __init__(self, message: str, field_name: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field_name


# (prompt id, version or None for the newest) -> that version; raises PromptNotFound.
PromptLookup = Callable[[str, "str | None"], StoredPrompt]


def parse_prompt(value: Any, param: str) -> dict[str, Any]:
    """The reference as the SDK types it: ``id``, optional ``version`` and ``variables`` (text only here)."""
    check_type(value, dict, param)
    for key in value:
        if key not in ("id", "version", "variables"):
            raise EventError("unknown_parameter", f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}")
    ref: dict[str, Any] = {"id": require(value, "id", str, f"{param}.id")}
    if value.get("version") is not None:
        ref["version"] = check_type(value["version"], str, f"{param}.version")
    variables = optional(value, "variables", dict, f"{param}.variables")
    if variables is not None:
        if len(variables) > MAX_VARIABLES:
            raise EventError("object_above_max_properties", f"Invalid '{param}.variables': at most {MAX_VARIABLES} "
                             "variables.", f"{param}.variables")
        ref["variables"] = {name: _variable(entry, f"{param}.variables.{name}") for name, entry in variables.items()}
    return ref


def _variable(value: Any, param: str) -> str | dict[str, str]:
    """A variable's value: a string or an ``input_text`` part (images and files: no model here reads them)."""
    check_type(value, (str, dict), param)
    if isinstance(value, str):
        return value
    kind = require(value, "type", str, f"{param}.type")
    if kind in ("input_image", "input_file"):
        raise EventError("invalid_value", f"Invalid '{param}': this server's models read text only; an "
                         f"{kind} variable cannot be used.", f"{param}.type")
    if kind != "input_text":
        raise EventError("invalid_value", f"Invalid value for '{param}.type': '{kind[:100]}'. Supported: "
                         "'input_text'.", f"{param}.type")
    for key in value:
        if key not in ("type", "text"):
            raise EventError("unknown_parameter", f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}")
    return {"type": "input_text", "text": require(value, "text", str, f"{param}.text")}


def apply_prompt(ref: dict[str, Any], param: str, lookup: PromptLookup | None) -> str:
    """The text of the version ``ref`` names, its placeholders filled in (the client's values, then defaults)."""
    if lookup is None:
        raise EventError("invalid_value", f"Invalid '{param}': stored prompts cannot be used here.", param)
    try:
        stored = lookup(ref["id"], ref.get("version"))
    except PromptNotFound as exc:
        raise EventError("invalid_value", exc.message, f"{param}.{exc.field}") from None
    given = {name: value if isinstance(value, str) else value["text"]
             for name, value in (ref.get("variables") or {}).items()}
    wanted = stored.variables()
    unknown = sorted(set(given) - wanted)
    if unknown:
        raise EventError("invalid_value", f"Invalid '{param}.variables': prompt '{stored.id}' version "
                         f"{stored.version} has no variable {', '.join(repr(n) for n in unknown)}.",
                         f"{param}.variables.{unknown[0]}")
    values = {**stored.defaults, **given}
    missing = sorted(wanted - set(values))
    if missing:
        raise EventError("missing_required_parameter", f"Missing prompt variables: {', '.join(missing)} (prompt "
                         f"'{stored.id}' version {stored.version} has no default for them).",
                         f"{param}.variables.{missing[0]}")
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], stored.text)


def pick(versions: Mapping[str, StoredPrompt], prompt_id: str, version: str | None) -> StoredPrompt:
    """The version asked for (None: the newest) among a prompt's versions; raises :class:`PromptNotFound`."""
    if not versions:
        raise PromptNotFound(f"Prompt with id '{prompt_id[:100]}' not found.", "id")
    if version is None:
        return versions[max(versions, key=_order)]
    if version not in versions:
        raise PromptNotFound(f"Prompt '{prompt_id[:100]}' has no version '{version[:20]}'. Versions: "
                             + ", ".join(sorted(versions, key=_order)) + ".", "version")
    return versions[version]


def _order(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (0, version)
