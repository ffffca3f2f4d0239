"""WhiteNoise's static files, and any other file a view streams, handed to an ASGI server as an async stream.

WhiteNoise's middleware answers with a ``FileResponse`` over a plain file, as does the admin's recording view.
Django's ASGI handler can only iterate such a synchronous stream with a warning ("StreamingHttpResponse must
consume synchronous iterators ..."): on every page load. For a request that came through ASGI this middleware
hands the response's file over as an async iterator, read in a worker thread, as Django's own
``ASGIStaticFilesHandler`` does; under WSGI it is WhiteNoise's middleware unchanged.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from whitenoise.middleware import WhiteNoiseMiddleware


def as_async_stream(response: HttpResponseBase) -> HttpResponseBase:
    """``response`` with its synchronous stream, if it has one, read in a thread and given as an async one."""
    if not isinstance(response, StreamingHttpResponse) or response.is_async:
        return response
    chunks = iter(response)  # the synchronous stream (iter(response.streaming_content))

    def read_all() -> list[bytes]:
        return list(chunks)

    async def stream() -> AsyncIterator[bytes]:
        # Small files (scripts, styles, a turn's WAV): read whole in one hop, as Django's static handler does.
        for chunk in await sync_to_async(read_all, thread_sensitive=False)():
            yield chunk

    response.streaming_content = stream()  # the file stays among the response's closers: closed after sending
    return response


class CollectedWhenPresent:
    """The settings, with ``STATIC_ROOT`` only where ``collectstatic`` made it: the finders serve the files
    without it, and WhiteNoise would warn at every start of a root that is not there."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.settings, name)
        if name == "STATIC_ROOT" and value and not os.path.isdir(value):
            return None
        return value


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise's middleware, whose responses (and those of the views behind it) reach an ASGI server as
    async streams. Django runs it in the sync chain wherever a middleware after it is sync-only, so it asks
    the request which server it came through rather than the chain."""

    def __init__(self, get_response: Callable[[HttpRequest], Any] | None = None, settings: Any = django_settings):
        super().__init__(get_response, CollectedWhenPresent(settings))

    def __call__(self, request: HttpRequest) -> Any:
        response = super().__call__(request)
        return as_async_stream(response) if isinstance(request, ASGIRequest) else response
