"""``manage.py check --deploy`` passes with the production settings; the local defaults stay plain http."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.server import ROOT

PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "S2S_PRODUCTION": "1",
    "DJANGO_ALLOWED_HOSTS": "s2s.example.com",
    "DJANGO_SECRET_KEY": "x7-Kq2!vLr9@pZ4#mN8$wB1%tY6^hJ3&cF5*gD0(sA2)eR7_uI9+oP4=lK1~",
}


def check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_check_deploy_passes_with_the_production_settings():
    result = check(PRODUCTION, "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_mode_refuses_the_development_secret_key():
    result = check({**PRODUCTION, "DJANGO_SECRET_KEY": ""})
    assert result.returncode != 0 and "DJANGO_SECRET_KEY" in result.stderr


def test_the_local_defaults_need_no_https():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']="
            "'s2s_project.settings'; django.setup(); from django.conf import settings as s; "
            "print(s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.S2S_AUTH_REQUIRED)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith(("S2S_", "DJANGO_"))},
    )
    assert result.stdout.split() == ["False", "False", "True"], result.stderr
