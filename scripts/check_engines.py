"""``make run``'s check before it serves: the engines the settings choose have their packages installed.

``make run`` installs the defaults' packages only; an engine on PyTorch (S2S_LM_BACKEND=transformers,
S2S_TTS_BACKEND=coqui, S2S_DEVICE=cuda) needs ``make setup-torch`` first. Without it the server would start and its
pool fail in the background; this stops the start instead, with the command, and no traceback. The rule is the
registry's (pipelines/backends/registry.py, ``unmet``), which the pool's start applies too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "s2s_project.settings")


def main() -> int:
    from django.conf import settings

    from pipelines.backends.registry import unmet

    pool = settings.S2S_POOL
    problems = unmet(pool.engines) if pool.profile == "real" else []
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
