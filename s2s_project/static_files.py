"""WhiteNoise's static files, and any other file a view streams, handed to an ASGI server as an async stream.

WhiteNoise's middleware answers with a ``FileResponse`` over a plain file, as does the admin's recording view.
Django's ASGI handler can only iterate such a synchronous stream with a warning ("StreamingHttpResponse must
consume synchronous iterators ..."), once per file: on every page load. Under ASGI this middleware reads the
file in a worker thread and hands it over as an async iterator, as Django's own ``ASGIStaticFilesHandler``
does; under WSGI it is WhiteNoise's middleware unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings as django_settings
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from whitenoise.middleware import WhiteNoiseMiddleware


def as_async_stream(response: HttpResponseBase) -> HttpResponseBase:
    """``response`` with its synchronous stream, if it has one, read in a thread and given as an async one."""
    if not isinstance(response, StreamingHttpResponse) or response.is_async:
        return response
    chunks: Iterator[bytes] = iter(response.streaming_content)  # type: ignore[arg-type]

    async def stream() -> AsyncIterator[bytes]:
        # Small files (scripts, styles, a turn's WAV): read whole in one hop, as Django's static handler does.
        for chunk in await sync_to_async(list, thread_sensitive=False)(chunks):
            yield chunk

    response.streaming_content = stream()  # the file stays among the response's closers: closed after sending
    return response


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise's middleware, able to run in an async chain (ASGI) without a warning per file."""

    sync_capable = True
    async_capable = True

    def __init__(
        self, get_response: Callable[[HttpRequest], Any] | None = None, settings: Any = django_settings
    ) -> None:
        super().__init__(get_response, settings)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.serve_async(request)
        return super().__call__(request)

    async def serve_async(self, request: HttpRequest) -> HttpResponseBase:
        if self.autorefresh:
            static_file = await sync_to_async(self.find_file, thread_sensitive=False)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is None:
            get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response  # type: ignore[assignment]
            response = await get_response(request)
        else:  # opening the file (and stat) is disk work: off the event loop
            response = await sync_to_async(self.serve, thread_sensitive=False)(static_file, request)
        return as_async_stream(response)
