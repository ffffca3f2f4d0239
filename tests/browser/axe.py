"""axe-core (from npm, pinned by tests/browser/agents_sdk/package-lock.json) run inside a Playwright page.

``serious(page)`` lists the violations of serious or critical impact on what the page shows now; the tests
assert it is empty. axe is given to the page as an init script (CDP's, which no Content-Security-Policy
stops), so it must be added to the context before the page is loaded: ``with_axe(context)``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import IN_CI

PACKAGE = Path(__file__).resolve().parent / "agents_sdk"
AXE = PACKAGE / "node_modules/axe-core/axe.min.js"
BLOCKING = ("serious", "critical")

RUN = """async (selector) => {
  const result = await window.axe.run(selector ? document.querySelector(selector) : document,
                                      {resultTypes: ["violations"]});
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map((n) => ({target: n.target.join(" "), impact: n.impact, summary: n.failureSummary})),
  }));
}"""


def axe_script() -> Path:
    """The pinned axe-core, installed with ``npm ci`` when missing; skips locally without npm, fails in CI."""
    if not AXE.exists():
        npm = shutil.which("npm")
        if npm is None:
            if IN_CI:
                pytest.fail("npm is not installed (apt-get install npm)")
            pytest.skip("npm is not installed")
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=PACKAGE, check=True, timeout=600, capture_output=True
        )
    return AXE


def with_axe(context: Any) -> Any:
    """Every page of this Playwright browser context gets ``window.axe``."""
    context.add_init_script(path=str(axe_script()))
    return context


def violations(page: Any, selector: str | None = None) -> list[dict]:
    """Every axe violation on the page (or within ``selector``), each with its impact and the nodes at fault."""
    return page.evaluate(RUN, selector)


def serious(page: Any, selector: str | None = None) -> list[dict]:
    """The violations of serious or critical impact: none may be left."""
    return [v for v in violations(page, selector) if v["impact"] in BLOCKING]
