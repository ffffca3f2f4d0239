"""ASGI entry point: HTTP through Django, WebSocket to the Realtime consumer.

Under uvicorn (which speaks ASGI lifespan) the process's parts start and stop
with the lifespan events; daphne has no lifespan, so ``manage.py serve`` does the
same through the same :class:`realtime.node.runtime.Runtime`. uvicorn closes live
WebSockets itself (1012) before the lifespan's shutdown, so there the drain finds
them ended already and only flushes the records.
"""

from __future__ import annotations

import asyncio
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "s2s_project.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from realtime.node import runtime  # noqa: E402
from realtime.server.body_limit import BodyLimit  # noqa: E402
from realtime.server.forwarded import ForwardedFor  # noqa: E402
from realtime.transports.routing import websocket_router  # noqa: E402
from realtime.transports.sip.signalling import listeners  # noqa: E402


async def lifespan(scope, receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            runtime.current().start(listeners=listeners())
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            rt = runtime.current()
            await rt.drain(settings.S2S_SHUTDOWN_GRACE_S)
            await asyncio.to_thread(rt.stop)
            await send({"type": "lifespan.shutdown.complete"})
            return


application = ProtocolTypeRouter(
    {
        # request bodies capped as they arrive; behind a trusted proxy, the client is the forwarded address
        "http": ForwardedFor(BodyLimit(django_asgi_app)),
        "websocket": ForwardedFor(websocket_router()),
        "lifespan": lifespan,
    }
)
