"""HTTP views: the browser client page and the health probes."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from realtime import runtime


def index(request: HttpRequest) -> HttpResponse:
    return render(request, "realtime/index.html")


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
    if not pool.admitting or free == 0:
        body["status"] = "warming" if not pool.warm else ("draining" if not pool.admitting else "full")
        return JsonResponse(body, status=503)
    return JsonResponse(body)
