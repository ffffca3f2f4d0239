"""HTTP views: the browser client page and the health probes."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve, reverse

from realtime import auth, runtime

REALTIME_PATH = "/v1/realtime"
CLIENT_SECRETS_PATH = "/v1/realtime/client_secrets"


def index(request: HttpRequest) -> HttpResponse:
    """The browser client. No key is put in the page: it asks for a short-lived client secret.

    With authentication off, or no client-secrets endpoint, the page connects without a
    secret (it also copes with a 404). With it on, only a signed-in staff user may mint
    secrets (``realtime.auth_views``); anyone else is shown where to sign in.
    """
    secrets_url = sign_in_url = ""
    if settings.S2S_AUTH_REQUIRED and _routed(CLIENT_SECRETS_PATH):
        if request.user.is_authenticated and request.user.is_staff:
            secrets_url = CLIENT_SECRETS_PATH
        else:
            sign_in_url = f"{reverse('admin:login')}?next={request.path}"
    context = {
        "realtime_path": REALTIME_PATH,
        "client_secrets_url": secrets_url,
        "sign_in_url": sign_in_url,
        "voices": settings.S2S_POOL.engines.all_voices,
    }
    return render(request, "realtime/index.html", context)


def _routed(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


def healthz(request: HttpRequest) -> JsonResponse:
    """Alive: the process answers."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """Ready: the pool is warm, admitting, and has a free unit (a load balancer routes on this)."""
    pool = runtime.get_pool()
    if pool is None:
        state = "failed" if runtime.start_error else "starting"
        return JsonResponse({"status": state, "error": runtime.start_error}, status=503)
    free = pool.free_units()
    body = {"status": "ready", "warm": pool.warm, "admitting": pool.admitting, "units": len(pool.units), "free_units": free}
    if settings.REDIS_URL:  # degraded Redis: sessions go on, so this alone does not make the node unready
        from realtime import channel_layer

        body["channel_layer"] = channel_layer.status()
    if not pool.admitting or free == 0:
        body["status"] = "warming" if not pool.warm else ("draining" if not pool.admitting else "full")
        return JsonResponse(body, status=503)
    return JsonResponse(body)


def metrics(request: HttpRequest) -> HttpResponse:
    """This process's metrics in the Prometheus text format (scrape every node).

    With ``S2S_METRICS_TOKEN`` set, only a request carrying ``Authorization: Bearer <token>`` gets them.
    """
    from realtime import metrics as exposition

    if settings.S2S_METRICS_TOKEN and not _bearer_matches(request, settings.S2S_METRICS_TOKEN):
        response = HttpResponse("A metrics token is required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response

    body = exposition.render(runtime.get_pool(), settings.S2S_NODE_NAME)
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")


def _bearer_matches(request: HttpRequest, token: str) -> bool:
    given = auth.bearer_token(request.headers.get("Authorization", ""))
    return given is not None and hmac.compare_digest(given.encode(), token.encode())
