"""The container test builds and runs images (minutes on two cores): `make test-container` runs it, `make test`
does not collect it (S2S_TEST_CONTAINER=1 turns it on; docs/deploy.md#containers)."""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("S2S_TEST_CONTAINER") == "1" else ["test_*.py"]
