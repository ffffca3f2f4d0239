"""Headless Debian Chromium driven by Playwright against a live server, with a WAV file as the microphone."""

from __future__ import annotations

import contextlib
import shutil
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.support.services import IN_CI
from tests.support.speech import silence, spoken

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
BASE_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
MIC_RATE = 48000


def chromium_path() -> str:
    """The system Chromium (Playwright's own download does not work here); skips locally, fails in CI."""
    path = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if path is None:
        message = "Chromium is not installed (apt-get install chromium, or `make system-deps`)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


def write_microphone_wav(
    path: Path, phrases: list[str], gap_s: float = 1.0, lead_s: float = 1.0, tail_s: float = 3.0
) -> float:
    """Piper speech of ``phrases`` as a 16-bit mono WAV (Chromium plays 24-bit files as silence); returns seconds."""
    parts = [silence(lead_s, MIC_RATE)]
    for index, phrase in enumerate(phrases):
        if index:
            parts.append(silence(gap_s, MIC_RATE))
        parts.append(spoken(phrase, MIC_RATE))
    parts.append(silence(tail_s, MIC_RATE))
    samples = np.concatenate(parts)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(MIC_RATE)
        out.writeframes((np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes())
    return len(samples) / MIC_RATE


@dataclass
class BrowserPage:
    """A page plus everything it reported as an error (console errors and uncaught exceptions)."""

    page: object
    errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # HTTP responses >= 400, to explain console errors

    def stats(self) -> dict:
        return self.page.evaluate("window.s2sStats")  # type: ignore[attr-defined]

    def wait_for(self, expression: str, timeout_s: float) -> None:
        self.page.wait_for_function(f"() => ({expression})", timeout=timeout_s * 1000)  # type: ignore[attr-defined]


@pytest.fixture
def open_page(tmp_path) -> Iterator[Callable[..., BrowserPage]]:
    """Opens the client page of a server in a fresh headless Chromium; ``microphone`` is a WAV path or None."""
    from playwright.sync_api import Error as PlaywrightError, sync_playwright

    executable = chromium_path()
    playwright = sync_playwright().start()
    browsers = []

    def opener(url: str, microphone: Path | None = None, viewport: dict | None = None) -> BrowserPage:
        args = list(BASE_ARGS)
        if microphone is not None:
            args += [
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={microphone}%noloop",
            ]
        profile = tmp_path / f"chromium-profile-{len(browsers)}"
        profile.mkdir()
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=executable,
            headless=True,
            args=args,
            viewport=viewport or {"width": 1280, "height": 800},
        )
        browsers.append(context)
        page = context.pages[0] if context.pages else context.new_page()
        watched = BrowserPage(page)
        page.on(
            "console",
            lambda message: (
                message.type == "error"
                and watched.errors.append(f"console: {message.text} ({message.location.get('url')} on {page.url})")
            ),
        )
        page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
        page.on(
            "response",
            lambda response: response.status >= 400 and watched.failed.append(f"{response.status} {response.url}"),
        )
        page.goto(url)
        page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'", timeout=10000)
        return watched

    try:
        yield opener
    finally:
        for context in browsers:
            # Each page is left as a person leaves it, so its call hangs up: a browser closed under a live call
            # left the server waiting 15 s for a silent peer, and its stop that long.
            for page in context.pages:
                with contextlib.suppress(PlaywrightError):
                    page.goto("about:blank", timeout=5000)
            context.close()
        playwright.stop()
