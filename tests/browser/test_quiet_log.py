"""Normal use logs no warning: a person talks through the page (its scripts and styles served under ASGI), an
operator reads the admin, the session's summary runs on the embedded Celery; then the server's log is read."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote

from tests.support.polling import wait_for
from tests.support.server import LiveServer

pytestmark = pytest.mark.browser

# A logged warning or worse from these libraries ("... WARNING kombu.connection: ..."), or a Python warning
# (the warnings module's "path.py:123: UserWarning: ...", which daphne's Twisted logs as "builtins.Warning").
LIBRARIES = ("django", "channels", "daphne", "twisted", "celery", "kombu", "whitenoise", "asgiref", "py.warnings")
LOGGED = re.compile(rf" (WARNING|ERROR|CRITICAL) ({'|'.join(re.escape(n) for n in LIBRARIES)})(\.[\w.]+)?: ")
WARNED = re.compile(r"\S+\.py:\d+: [\w.]*Warning: ")


def warnings_in(log: str) -> list[str]:
    return [line for line in log.splitlines() if LOGGED.search(line) or WARNED.search(line)]


def test_the_patterns_catch_what_the_libraries_print():
    log = (
        "2026-01-01 10:00:00,000 WARNING kombu.connection: No hostname was supplied.\n"
        "2026-01-01 10:00:00,000 WARNING twisted: /x/django/core/handlers/asgi.py:336: builtins.Warning: "
        "StreamingHttpResponse must consume synchronous iterators\n"
        "/x/django/core/handlers/base.py:61: UserWarning: No directory at: /x/staticfiles/\n"
        "2026-01-01 10:00:00,000 INFO realtime.node.runtime: the pool is warm\n"
        "2026-01-01 10:00:00,000 WARNING realtime.server.launcher: authentication is OFF\n"  # ours, on purpose
    )
    assert len(warnings_in(log)) == 3


@pytest.mark.parametrize("transport", ["webrtc", "websocket"])
def test_a_session_through_the_page_and_the_admin_logs_no_warning(tmp_path, open_page, transport):
    server = LiveServer(
        tmp_path,
        {
            "DJANGO_SUPERUSER_USERNAME": "admin",
            "DJANGO_SUPERUSER_PASSWORD": "quiet-pw",
            "DJANGO_SUPERUSER_EMAIL": "admin@example.com",
        },
    ).start(ready_timeout=120)
    try:
        server.manage("createsuperuser", "--noinput")
        query = "" if transport == "webrtc" else "?transport=websocket"
        client = open_page(f"{server.http}/{query}")
        page = client.page
        page.click("#connect")
        client.wait_for("window.s2sStats.state === 'listening'", 15)
        session_id = client.stats()["sessionId"]
        page.fill("#message", "a quiet question")
        page.press("#message", "Enter")
        client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 20)
        page.click("#connect")
        client.wait_for("window.s2sStats.state === 'disconnected'", 10)
        wait_for(lambda: server.get("/readyz")[0] == 200, timeout=20, what="the unit free again")

        page.goto(f"{server.http}/admin/login/")  # the admin's own static files
        page.fill("#id_username", "admin")
        page.fill("#id_password", "quiet-pw")
        page.click("input[type=submit]")
        page.wait_for_selector("#site-name")
        session = f"{server.http}/admin/realtime/realtimesession/{quote(session_id)}/change/"
        # the session's summary (a Celery task, eager without a broker) is written after its end
        wait_for(
            lambda: page.goto(session) and "so far" not in page.inner_text("#summary h2"),
            timeout=20,
            interval=0.5,
            what="the session's summary",
        )
        assert client.errors == []
    finally:
        server.stop()
    log = server.full_log()
    assert warnings_in(log) == [], "\n".join(warnings_in(log))
