"""The page with authentication on: it mints a one-use client secret for a signed-in staff user."""

from __future__ import annotations

import pytest

from tests.support.server import LiveServer

pytestmark = pytest.mark.browser

PASSWORD = "browser-test-password-1"


@pytest.fixture
def auth_server(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_AUTH_REQUIRED": "1", "DJANGO_SUPERUSER_PASSWORD": PASSWORD})
    server.start(ready_timeout=120)
    server.manage("createsuperuser", "--noinput", "--username", "staff", "--email", "staff@example.com")
    yield server
    server.stop()


def test_a_signed_in_staff_user_connects_with_a_short_lived_client_secret(auth_server, open_page):
    client = open_page(auth_server.http + "/")
    page = client.page
    assert page.is_visible("#sign-in a")
    page.click("#connect")  # not signed in: no socket is opened, the page says what to do
    assert "sign in" in page.inner_text("#alert")
    assert client.stats()["events"] == {} and client.stats()["clientSecret"] is None

    page.click("#sign-in a")
    page.fill("#id_username", "staff")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(auth_server.http + "/", timeout=10000)
    page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'", timeout=10000)
    assert page.locator("#sign-in").count() == 0
    assert "sk-s2s-" not in page.content()  # no long-lived key in the page

    page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening'", 15)
    assert client.stats()["clientSecret"] == "used"
    page.fill("#message", "hello with a secret")
    page.press("#message", "Enter")
    client.wait_for(
        "document.querySelector('#chat li[data-role=assistant] .text')?.textContent === 'You said: hello with a secret.'",  # noqa: E501
        15,
    )
    # Django's admin login page has no favicon link, so Chromium logs a 404 for /favicon.ico there;
    # that is not this page's doing. Everything on the client page itself must be clean.
    assert [e for e in client.errors if not e.endswith(f"on {auth_server.http}/admin/login/?next=/)")] == []
