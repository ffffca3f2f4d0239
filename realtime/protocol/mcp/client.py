"""Talks to MCP servers with the official ``mcp`` SDK (Streamable HTTP): list a server's tools, run one.

Every operation opens its own connection and is bounded: ``policy.timeout_s`` for the whole of it
(connect, initialize, the request), ``policy.max_response_bytes`` for what the server sends back. The
HTTP client follows no redirect and checks every request's URL against the policy, so a server can
lead the session nowhere else. Failures come out as :class:`McpFailure` with a message for the client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2 as httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import PaginatedRequestParams

from realtime.protocol.mcp.config import ListedTool, McpPolicy, McpServer

logger = logging.getLogger(__name__)

MAX_PAGES = 10  # of a tools/list answer


@dataclass(eq=False)
class McpFailure(Exception):
    """An MCP operation that failed; ``kind`` is the item's error type (``http_error``, ``protocol_error``,
    ``tool_execution_error``)."""

    kind: str
    message: str
    code: int | None = None

    def as_error(self) -> dict[str, Any]:
        """The ``error`` of an ``mcp_call`` item (the SDK's ``RealtimeMcp*Error``)."""
        if self.kind == "tool_execution_error":
            return {"type": self.kind, "message": self.message}
        return {
            "type": self.kind,
            "code": self.code or (500 if self.kind == "http_error" else -32603),
            "message": self.message,
        }


class _Guard:
    """What one operation's HTTP traffic may do; the first refusal is kept for the failure's message."""

    def __init__(self, policy: McpPolicy) -> None:
        self.policy = policy
        self.refusal: McpFailure | None = None

    def refuse(self, failure: McpFailure) -> McpFailure:
        self.refusal = self.refusal or failure
        return failure


class _CappedStream(httpx.AsyncByteStream):
    """One response's body, cut off past ``max_response_bytes``."""

    def __init__(self, stream: httpx.AsyncByteStream, guard: _Guard) -> None:
        self._stream, self._guard = stream, guard
        self._received = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._received += len(chunk)
            if self._received > self._guard.policy.max_response_bytes:
                raise self._guard.refuse(
                    McpFailure(
                        "http_error",
                        f"the MCP server sent more than {self._guard.policy.max_response_bytes} bytes "
                        "(S2S_MCP_MAX_RESPONSE_BYTES)",
                        413,
                    )
                )
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _GuardedTransport(httpx.AsyncBaseTransport):
    """Checks each request's URL (every hop), refuses redirects, caps the bytes of every response."""

    def __init__(self, guard: _Guard) -> None:
        self._guard = guard
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self._guard.policy.allows(str(request.url)):
            raise self._guard.refuse(McpFailure("http_error", f"{request.url} is not under S2S_MCP_ALLOWED_URLS", 403))
        response = await self._inner.handle_async_request(request)
        if response.is_redirect:
            await response.aclose()
            target = response.headers.get("location", "?")
            raise self._guard.refuse(
                McpFailure(
                    "http_error",
                    f"the MCP server redirected to {target}: redirects are not followed",
                    response.status_code,
                )
            )
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._guard),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def _connected(server: McpServer, guard: _Guard) -> AsyncIterator[ClientSession]:
    timeout = httpx.Timeout(guard.policy.timeout_s)
    async with (
        httpx.AsyncClient(
            transport=_GuardedTransport(guard), headers=dict(server.headers), timeout=timeout, follow_redirects=False
        ) as http,
        streamable_http_client(server.url, http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def _bounded(server: McpServer, policy: McpPolicy, what: str, operation: Any) -> Any:
    """Runs ``operation(session)`` within the time limit; any failure becomes an :class:`McpFailure`."""
    guard = _Guard(policy)
    try:
        with anyio.fail_after(policy.timeout_s):
            async with _connected(server, guard) as session:
                return await operation(session)
    except McpFailure:
        raise
    except TimeoutError:
        if guard.refusal is not None:
            raise guard.refusal from None
        raise McpFailure(
            "http_error",
            f"{what} on MCP server '{server.label}' took longer than {policy.timeout_s:g}s (S2S_MCP_TIMEOUT_S)",
            504,
        ) from None
    except Exception as exc:  # the SDK wraps transport errors in groups and its own types
        if guard.refusal is not None:
            raise guard.refusal from None
        if (failure := _innermost(exc)) is not None and isinstance(failure, McpFailure):
            raise failure from None
        logger.info("MCP server %s: %s failed: %r", server.label, what, exc)
        raise McpFailure("protocol_error", f"{what} on MCP server '{server.label}' failed: {_describe(exc)}") from None


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _innermost(exc)
    return f"{type(exc).__name__}: {exc}"[:500]


async def list_tools(server: McpServer, policy: McpPolicy) -> list[ListedTool]:
    """The server's tools (all pages, bounded), as they are, before any ``allowed_tools`` filter."""

    async def operation(session: ClientSession) -> list[ListedTool]:
        tools: list[ListedTool] = []
        cursor = None
        for _ in range(MAX_PAGES):
            result = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            for tool in result.tools:
                hints = tool.annotations
                annotations = hints.model_dump(by_alias=True, exclude_none=True) if hints else None
                read_only = hints.read_only_hint if hints else None
                tools.append(
                    ListedTool(tool.name, tool.description or "", dict(tool.input_schema), read_only, annotations)
                )
            cursor = result.next_cursor
            if not cursor:
                break
        return tools

    return await _bounded(server, policy, "listing the tools", operation)


async def call_tool(server: McpServer, policy: McpPolicy, name: str, arguments: str) -> str:
    """Runs tool ``name`` on the server; its text output (a tool's own error raises ``tool_execution_error``)."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        raise McpFailure("tool_execution_error", f"the arguments of {name} are not JSON") from None

    async def operation(session: ClientSession) -> str:
        result = await session.call_tool(name, parsed if isinstance(parsed, dict) else {})
        text = "\n".join(_content_text(part) for part in result.content)
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content)
        if result.is_error:
            raise McpFailure("tool_execution_error", text or f"the tool {name} failed")
        return text

    return await _bounded(server, policy, f"running {name}", operation)


def _content_text(part: Any) -> str:
    text = getattr(part, "text", None)
    return text if isinstance(text, str) else json.dumps(part.model_dump(mode="json", exclude_none=True))
