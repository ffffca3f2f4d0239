"""The benchmarks' figures in docs/benchmarks.md: each bench owns a section between two markers."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(text: str, begin: str, end: str, doc: Path = DOC) -> None:
    """Puts ``text`` (which starts with ``begin`` and ends with ``end``) in place of that section, or at the end."""
    doc.parent.mkdir(parents=True, exist_ok=True)
    current = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if begin in current and end in current:
        current = current[: current.index(begin)] + text + current[current.index(end) + len(end) :]
    else:
        current = current.rstrip("\n") + "\n\n" + text + "\n"
    doc.write_text(current)


def machine_load(load: float) -> str:
    """How busy the machine was, from the load average at the end of a run: above one per core, other work
    shared the cores with the bench (whose own server and client keep about two busy)."""
    cores = os.cpu_count() or 1
    if load > cores:
        return (
            f"**shared and busy**: other work ran on the same {cores} cores during the run (load average "
            f"{load:.1f} at the end), so the spread is partly the machine's"
        )
    return f"quiet: nothing else ran on the {cores} cores (load average {load:.1f} at the end)"


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def latency_row(label: str, values: list[float], digits: int = 0) -> str:
    """A table row: ``label``, the count, then p50, p90, min and max of ``values`` (ms) to ``digits`` places."""
    figures = (pct(values, 50), pct(values, 90), min(values), max(values))
    return f"| {label} | {len(values)} | " + " | ".join(f"{v:.{digits}f}" for v in figures) + " |"
