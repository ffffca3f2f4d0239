"""The image's HEALTHCHECK: healthy while ``/readyz`` says ``ready`` or ``full`` (a busy node is a working one).

Warming, draining, a start error or no answer: unhealthy. Load balancers route on ``/readyz`` itself.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.error
import urllib.request

HEALTHY = {"ready", "full"}


def status(url: str) -> str:
    try:
        # Its own process on loopback: the certificate names the public host, not 127.0.0.1.
        context = ssl._create_unverified_context() if url.startswith("https") else None
        with urllib.request.urlopen(url, timeout=4, context=context) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except OSError as exc:
        return f"no answer ({exc})"
    try:
        return str(json.loads(body).get("status"))
    except ValueError:
        return "unreadable"


if __name__ == "__main__":
    scheme = "https" if os.environ.get("S2S_TLS_CERT") else "http"
    port = os.environ.get("S2S_PORT", "8000")
    found = status(f"{scheme}://127.0.0.1:{port}/readyz")
    print(found)
    sys.exit(0 if found in HEALTHY else 1)
