"""ASGI entry point: HTTP through Django, WebSocket to the Realtime consumer.

Under uvicorn (which speaks ASGI lifespan) the pool starts and stops with the
lifespan events; daphne has no lifespan, so ``manage.py serve`` starts it.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "s2s_project.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from realtime import cluster, runtime  # noqa: E402
from realtime.routing import websocket_urlpatterns  # noqa: E402


async def lifespan(scope, receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if runtime.get_pool() is None:
                runtime.start(background=True)
                cluster.start_heartbeat()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            cluster.stop_heartbeat()
            runtime.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return


application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter(websocket_urlpatterns),
        "lifespan": lifespan,
    }
)
