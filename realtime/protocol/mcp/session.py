"""The MCP work of one session: listing its servers' tools and running the model's calls of them.

Everything runs on the session's event loop, in tasks the session owns (``spawn``: kept and
cancelled when the session ends). The model's calls reach here as ``ToolsPending`` (the LM has
paused the response); each runs on its MCP server, its ``mcp_call`` item gets the output or the
error, and ``ResponseResume`` always goes back to the LM (whatever happened), so the response
goes on from the results, or ends, and the unit is never left waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

from pipelines import messages as m, tools as tool_parsing
from pipelines.errors import ToolDefinitionError
from pipelines.ids import new_id
from realtime.protocol.conversation import Conversation
from realtime.protocol.events import mcp_call_item, server_event
from realtime.protocol.mcp import client as mcp_client
from realtime.protocol.mcp.client import McpFailure
from realtime.protocol.mcp.config import HostedTool, ListedTool, McpServer
from realtime.protocol.responses import ResponseState
from realtime.protocol.session.config import SessionConfig

logger = logging.getLogger(__name__)

Event = dict[str, Any]


class McpSession:
    """The session's MCP servers: which are listed, their tools (in ``session.mcp_tools``), the calls running."""

    def __init__(
        self,
        session: SessionConfig,
        conversation: Conversation,
        send: Callable[[Event], Awaitable[None]],
        spawn: Callable[[Coroutine[Any, Any, None], str], None],
        tools_changed: Callable[[], None],
    ) -> None:
        self.session = session
        self.conversation = conversation
        self._send = send
        self._spawn = spawn
        self._tools_changed = tools_changed
        self._servers: dict[str, McpServer] = {}  # label -> the server as its tools were (or are being) listed
        self._runs: dict[str, asyncio.Task[None]] = {}  # response id -> the task running its calls
        conversation.responses.list_tools = self.list_for_response
        conversation.responses.on_cancel = self._cancel_calls

    # --- listing ------------------------------------------------------------------------

    def servers_changed(self) -> list[Event]:
        """After the session's tools changed: lists new or changed servers' tools, forgets removed ones."""
        current = {server.label: server for server in self.session.mcp_servers}
        gone = [label for label, server in self._servers.items() if current.get(label) != server]
        for label in gone:
            del self._servers[label]
        if gone:
            self._set_tools(lambda tool: tool.server.label not in gone, {})
        events: list[Event] = []
        for label, server in current.items():
            if label in self._servers:
                continue
            self._servers[label] = server
            item = {"id": new_id("item"), "type": "mcp_list_tools", "server_label": label, "tools": []}
            events += self.conversation.add_item(item)
            events.append(server_event("mcp_list_tools.in_progress", item_id=item["id"]))
            self._spawn(self._list(server, item), "mcp-list")
        return events

    async def _list(self, server: McpServer, item: Event) -> None:
        def adopt(tools: list[ListedTool]) -> None:
            if self._servers.get(server.label) is not server:
                return  # replaced or removed meanwhile
            taken = {name for name, hosted in self.session.mcp_tools.items() if hosted.server.label != server.label}
            self._set_tools(
                lambda hosted: hosted.server.label != server.label,
                {tool.name: HostedTool(server, tool) for tool in tools if tool.name not in taken},
            )

        if await self._fetch(server, item, adopt) is None and self._servers.get(server.label) is server:
            del self._servers[server.label]  # a later session.update tries again

    def list_for_response(self, response_id: str, servers: tuple[McpServer, ...]) -> list[Event]:
        """A response's own MCP servers: list their tools, then let the response start with them."""
        events: list[Event] = []
        items: list[tuple[McpServer, Event]] = []
        for server in servers:
            item = {"id": new_id("item"), "type": "mcp_list_tools", "server_label": server.label, "tools": []}
            events += self.conversation.add_item(item)
            events.append(server_event("mcp_list_tools.in_progress", item_id=item["id"]))
            items.append((server, item))
        self._spawn(self._release(response_id, items), "mcp-list")
        return events

    async def _release(self, response_id: str, items: list[tuple[McpServer, Event]]) -> None:
        found: dict[str, HostedTool] = {}
        try:
            for server, item in items:
                for tool in await self._fetch(server, item) or []:
                    found.setdefault(tool.name, HostedTool(server, tool))
        finally:  # always: the response waits for it
            self.conversation.responses.release(response_id, found)

    async def _fetch(
        self, server: McpServer, item: Event, adopt: Callable[[list[ListedTool]], None] | None = None
    ) -> list[ListedTool] | None:
        """Lists a server's tools and says so; returns those ``allowed_tools`` lets through (None: it failed).

        ``adopt`` takes them before ``mcp_list_tools.completed`` goes out, so a client that sees it can use them.
        """
        try:
            listed = await mcp_client.list_tools(server, self.session.mcp_policy)
        except McpFailure as exc:
            await self._failed(
                server_event("mcp_list_tools.failed", item_id=item["id"]),
                "mcp_list_tools_failed",
                f"Listing the tools of MCP server '{server.label}' failed: {exc.message}",
                None,
            )
            for event in self.conversation.item_done(item):
                await self._send(event)
            return None
        tools = [tool for tool in listed if server.allows(tool.name, tool.read_only) and _usable(server, tool)]
        if adopt is not None:
            adopt(tools)
        await self._send(server_event("mcp_list_tools.completed", item_id=item["id"]))
        for event in self.conversation.item_done({**item, "tools": [tool.as_item_tool() for tool in tools]}):
            await self._send(event)
        return tools

    def _set_tools(self, keep: Callable[[HostedTool], bool], added: dict[str, HostedTool]) -> None:
        self.session.mcp_tools = {**{n: t for n, t in self.session.mcp_tools.items() if keep(t)}, **added}
        self._tools_changed()

    # --- calls ----------------------------------------------------------------------------

    def pending(self, msg: m.ToolsPending) -> None:
        """The LM paused a response for the server's calls: run them (in a task of the session)."""
        self._spawn(self._run(msg), "mcp-call")

    def _cancel_calls(self, response_id: str) -> None:
        if (task := self._runs.get(response_id)) is not None:
            task.cancel()  # its ``finally`` resumes the response, which ends cancelled

    async def _run(self, msg: m.ToolsPending) -> None:
        results: list[m.HistoryEntry] = []
        finish = True
        if (task := asyncio.current_task()) is not None:
            self._runs[msg.response_id] = task
        try:
            state = self.conversation.responses.live(msg.response_id)
            if state is None:
                return
            finish = False
            for call in msg.calls:
                tool = state.mcp.get(call.name)
                if tool is None or tool.needs_approval:
                    finish = True  # the response ends with its approval request
                    continue
                if (index := state.calls.get(call.item_id)) is None:
                    continue
                output = await self._call(state, index, state.output[index], tool)
                results.append(replace(call, output=output))
            approved, state.approved = state.approved, []
            for request in approved:
                tool = request.tool
                item = mcp_call_item(new_id("item"), tool.server.label, tool.name, request.arguments, request.id)
                events = self.conversation.responses.output_added(state, item)
                index = len(state.output) - 1
                for event in events:
                    await self._send(event)
                output = await self._call(state, index, item, request.tool)
                results.append(m.FunctionCallOutputItem(item["id"], request.call_id, output))
        finally:  # always: the LM holds the response until it hears back
            self._runs.pop(msg.response_id, None)
            self.conversation.port.submit(
                m.ResponseResume(
                    generation=self.conversation.port.generation,
                    response_id=msg.response_id,
                    results=tuple(results),
                    finish=finish,
                )
            )

    async def _call(self, state: ResponseState, index: int, item: Event, tool: HostedTool) -> str:
        """Runs one call on its server; sends its events; returns what the model reads of it."""
        ids = {"item_id": item["id"], "output_index": index}
        await self._send(server_event("response.mcp_call.in_progress", **ids))
        try:
            output = await mcp_client.call_tool(tool.server, self.session.mcp_policy, tool.name, item["arguments"])
        except McpFailure as exc:
            final, text = {**item, "error": exc.as_error()}, f"Error: {exc.message}"
            await self._failed(
                server_event("response.mcp_call.failed", **ids),
                "mcp_call_failed",
                f"The MCP tool '{tool.name}' of server '{tool.server.label}' failed: {exc.message}",
                state.event_id,
            )
        else:
            final, text = {**item, "output": output}, output
            await self._send(server_event("response.mcp_call.completed", **ids))
        for event in self.conversation.responses.output_done(state, index, final):
            await self._send(event)
        return text

    async def _failed(self, event: Event, code: str, message: str, event_id: str | None) -> None:
        self.conversation.errors += 1
        await self._send(event)
        await self._send(
            server_event(
                "error",
                error={"type": "server_error", "code": code, "message": message, "param": None, "event_id": event_id},
            )
        )


def _usable(server: McpServer, tool: ListedTool) -> bool:
    """Whether the model can be offered the tool (its input schema is one a function could have)."""
    try:
        tool_parsing.check_parameters_schema(tool.input_schema, "input_schema")
    except ToolDefinitionError as exc:
        logger.info("MCP server %s: tool %s left out: %s", server.label, tool.name, exc.message)
        return False
    return bool(tool_parsing.NAME.match(tool.name))
