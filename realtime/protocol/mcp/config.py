"""MCP tools as a session or a response offers them: the server's policy, and the validated tool entries.

Import-cheap on purpose (settings build :class:`McpPolicy` from the environment): the client
that talks to MCP servers is ``realtime/protocol/mcp/client.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit, urlunsplit

from pipelines.config import FunctionTool
from realtime.protocol.wire import EventError, check_type

LABEL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
KEYS = {
    "type",
    "server_label",
    "server_url",
    "allowed_tools",
    "require_approval",
    "headers",
    "authorization",
    "server_description",
    "connector_id",
    "tunnel_id",
    "allowed_callers",
    "defer_loading",
}
TURN_ON = (
    "set S2S_MCP_ALLOWED_URLS to the URL prefixes of the MCP servers this server may reach "
    "(comma-separated, e.g. https://mcp.internal/), then restart it"
)


@dataclass(frozen=True)
class McpPolicy:
    """What the server lets sessions reach: URL prefixes (none: MCP is off), time and size limits."""

    allowed_urls: tuple[str, ...] = ()
    timeout_s: float = 10.0
    max_response_bytes: int = 1024 * 1024

    @property
    def enabled(self) -> bool:
        return bool(self.allowed_urls)

    def allows(self, url: str) -> bool:
        """Whether ``url``, normalised (:func:`normalize_url`), lies under one of the allowed prefixes: same
        scheme, host and port, path below. A URL that does not normalise (a dot segment) is never allowed."""
        normal = normalize_url(url)
        if normal is None:
            return False
        target = urlsplit(normal)
        for prefix in self.allowed_urls:
            allowed = urlsplit(prefix)
            if (allowed.scheme, allowed.hostname) != (target.scheme, target.hostname):
                continue
            if (allowed.port or _default_port(allowed.scheme)) != (target.port or _default_port(target.scheme)):
                continue
            base = allowed.path.rstrip("/")
            if target.path == base or target.path.startswith(base + "/") or not base:
                return True
        return False


UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# How many layers of percent-encoding a path segment may carry (``%252e`` is two); one more is refused.
MAX_DECODINGS = 4
# Request headers a tool may not set. Some frame the request or belong to one hop (RFC 9110 s7.6.1); the others
# route it or speak for a proxy in front of the MCP server: Host, X-Forwarded-Host or Forwarded reach another virtual
# host, X-Original-URL or X-Rewrite-URL another path, X-Forwarded-For or X-Real-IP claim another client's address.
# Names are compared lower-cased with '_' read as '-', as CGI and WSGI servers read them.
REFUSED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "upgrade",
        "expect",
        "forwarded",
        "via",
        "x-host",
        "x-real-ip",
        "x-client-ip",
        "client-ip",
        "true-client-ip",
        "x-cluster-client-ip",
        "cf-connecting-ip",
        "fastly-client-ip",
        "x-originating-ip",
        "x-remote-ip",
        "x-remote-addr",
        "x-rewrite-url",
        "x-http-method-override",
        "x-http-method",
        "x-method-override",
        "proxy",
    }
)
REFUSED_HEADER_PREFIXES = ("x-forwarded-", "x-original-", "x-envoy-")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def normalize_url(url: str) -> str | None:
    """``url`` as it will be requested: an http(s) URL without credentials, its percent-encoded unreserved
    characters decoded and other escapes upper-cased (RFC 3986 s6.2.2); None when it is not one, or when its path
    is not :func:`safe_path`: the receiving server would resolve it to another path than the one the allow-list
    saw."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return None
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in url) or not safe_path(parts.path):
        return None

    def unescape(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in UNRESERVED else "%" + match.group(1).upper()

    path = _PERCENT.sub(unescape, parts.path)
    host = parts.hostname.lower()
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme.lower(), netloc, path, _PERCENT.sub(unescape, parts.query), ""))


def safe_path(path: str) -> bool:
    """Whether every server resolves ``path`` to itself. Each segment, and what it decodes to, layer after layer
    (at most :data:`MAX_DECODINGS`), must be printable ASCII with valid escapes and hold no slash, backslash or
    ``;`` (a path parameter: Tomcat reads ``..;`` as ``..``) nor be dots alone. Non-ASCII is refused written or
    encoded: overlong UTF-8 (``%c0%ae``) and look-alikes (``‥``, ``／``) become dots and slashes on some servers."""
    if not path.isascii():
        return False
    for segment in path.split("/"):
        for _ in range(MAX_DECODINGS + 1):
            if (
                any(char in "/\\;" or not " " <= char <= "~" for char in segment)
                or _BAD_ESCAPE.search(segment)
                or (segment and not segment.strip(". "))
            ):
                return False
            decoded = unquote_to_bytes(segment)
            if not decoded.isascii():
                return False
            if decoded == segment.encode():
                break
            segment = decoded.decode("ascii")
        else:
            return False
    return True


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


@dataclass(frozen=True)
class ToolFilter:
    """``{"tool_names": [...], "read_only": bool}``: a tool matches when it meets every condition given."""

    tool_names: tuple[str, ...] | None = None
    read_only: bool | None = None

    def matches(self, name: str, read_only: bool | None) -> bool:
        if self.tool_names is None and self.read_only is None:
            return False
        if self.tool_names is not None and name not in self.tool_names:
            return False
        return self.read_only is None or bool(read_only) == self.read_only


@dataclass(frozen=True)
class Approval:
    """``require_approval``: ``always``, ``never``, or filters; a tool no filter names needs approval (the default)."""

    mode: str = "always"  # always | never | filter
    always: ToolFilter | None = None
    never: ToolFilter | None = None

    def needed(self, name: str, read_only: bool | None) -> bool:
        if self.mode != "filter":
            return self.mode == "always"
        return not (self.never is not None and self.never.matches(name, read_only))


@dataclass(frozen=True)
class McpServer:
    """One ``{"type": "mcp", ...}`` entry, validated against the policy."""

    label: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    description: str | None = None
    allowed: ToolFilter | None = None  # None: every tool of the server
    approval: Approval = Approval()
    echo: dict[str, Any] = field(default_factory=dict, compare=False)  # as the session shows it (no secrets)

    def allows(self, name: str, read_only: bool | None) -> bool:
        return self.allowed is None or self.allowed.matches(name, read_only)


def parse_server(entry: dict[str, Any], param: str, policy: McpPolicy) -> McpServer:
    """An ``mcp`` tool entry; raises :class:`EventError` naming the field at fault."""
    for key in entry:
        if key not in KEYS:
            raise EventError("unknown_parameter", f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}")
    for key in ("connector_id", "tunnel_id"):
        if entry.get(key) is not None:
            raise EventError(
                "invalid_value",
                f"'{param}.{key}' is not supported: this server has no connectors or "
                "tunnels. Give the MCP server's 'server_url' instead.",
                f"{param}.{key}",
            )
    label = entry.get("server_label")
    if not isinstance(label, str) or not LABEL.match(label):
        raise EventError(
            "invalid_value",
            f"'{param}.server_label' must be 1 to 64 letters, digits, underscores or dashes.",
            f"{param}.server_label",
        )
    url = entry.get("server_url")
    if not isinstance(url, str) or not url:
        raise EventError(
            "missing_required_parameter", f"Missing required parameter: '{param}.server_url'.", f"{param}.server_url"
        )
    if not policy.enabled:
        raise EventError(
            "invalid_value",
            f"MCP tools are off on this server, so '{param}.server_url' cannot be used. To turn them on, {TURN_ON}.",
            f"{param}.server_url",
        )
    normal = normalize_url(url)
    if normal is None:
        raise EventError(
            "invalid_value",
            f"'{param}.server_url' must be an http(s) URL without credentials, and its path without dot segments "
            "('.', '..'), encoded slashes, backslashes, ';' or non-ASCII characters, written or percent-encoded.",
            f"{param}.server_url",
        )
    if not policy.allows(normal):
        raise EventError(
            "invalid_value",
            f"'{param}.server_url' is not under a URL this server may reach (S2S_MCP_ALLOWED_URLS).",
            f"{param}.server_url",
        )
    headers = dict(check_type(entry.get("headers") or {}, dict, f"{param}.headers"))
    for key, value in headers.items():
        check_header(key, value, f"{param}.headers.{key}")
    if entry.get("authorization") is not None:
        headers["Authorization"] = "Bearer " + check_type(entry["authorization"], str, f"{param}.authorization")
    description = entry.get("server_description")
    if description is not None:
        check_type(description, str, f"{param}.server_description")
    server = McpServer(
        label,
        normal,
        tuple(headers.items()),
        description,
        parse_allowed(entry.get("allowed_tools"), f"{param}.allowed_tools"),
        parse_approval(entry.get("require_approval"), f"{param}.require_approval"),
    )
    echo = {k: v for k, v in entry.items() if k not in ("headers", "authorization")}
    return replace(server, echo={"type": "mcp", **echo})


def check_header(name: Any, value: Any, param: str) -> None:
    """A header a tool may send: a token for a name, one line of text for a value, and none that frames or
    routes the request or that a proxy sets (:data:`REFUSED_HEADERS`, :data:`REFUSED_HEADER_PREFIXES`); raises
    :class:`EventError` with ``param``."""
    if not isinstance(value, str):
        raise EventError("invalid_type", f"'{param}' must be a string.", param)
    if not isinstance(name, str) or not _TOKEN.match(name) or any(char in value for char in "\r\n\x00"):
        raise EventError("invalid_value", f"'{param}' is not a valid HTTP header (name or value).", param)
    key = name.lower().replace("_", "-")
    if key in REFUSED_HEADERS or key.startswith(REFUSED_HEADER_PREFIXES):
        raise EventError(
            "invalid_value",
            f"'{param}': the {name} header cannot be set by a tool (it frames or routes the request, "
            "or is a proxy's to set).",
            param,
        )


def parse_filter(value: Any, param: str) -> ToolFilter:
    check_type(value, dict, param)
    for key in value:
        if key not in ("tool_names", "read_only"):
            raise EventError("unknown_parameter", f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}")
    names = value.get("tool_names")
    if names is not None:
        check_type(names, list, f"{param}.tool_names")
        if not all(isinstance(name, str) for name in names):
            raise EventError("invalid_type", f"'{param}.tool_names' must be a list of strings.", f"{param}.tool_names")
    read_only = value.get("read_only")
    if read_only is not None:
        check_type(read_only, bool, f"{param}.read_only")
    return ToolFilter(None if names is None else tuple(names), read_only)


def parse_allowed(value: Any, param: str) -> ToolFilter | None:
    """``allowed_tools``: a list of names, or a filter object (None: all tools)."""
    if value is None:
        return None
    if isinstance(value, list):
        return parse_filter({"tool_names": value}, param)
    return parse_filter(value, param)


def parse_approval(value: Any, param: str) -> Approval:
    """``require_approval``: ``always`` (the default), ``never``, or ``{"always": filter, "never": filter}``."""
    if value is None or value in ("always", "never"):
        return Approval(value or "always")
    if isinstance(value, str):
        raise EventError(
            "invalid_value", f"Invalid value for '{param}': expected 'always', 'never' or a filter object.", param
        )
    check_type(value, dict, param)
    for key in value:
        if key not in ("always", "never"):
            raise EventError("unknown_parameter", f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}")
    always = parse_filter(value["always"], f"{param}.always") if value.get("always") is not None else None
    never = parse_filter(value["never"], f"{param}.never") if value.get("never") is not None else None
    return Approval("filter", always, never)


@dataclass(frozen=True)
class ListedTool:
    """A tool as an MCP server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool | None = None
    annotations: dict[str, Any] | None = field(default=None, compare=False)

    def as_item_tool(self) -> dict[str, Any]:
        """The tool as the ``mcp_list_tools`` item lists it."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }


@dataclass(frozen=True)
class HostedTool:
    """A listed tool the model may call, and the server that runs it."""

    server: McpServer
    tool: ListedTool

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def needs_approval(self) -> bool:
        return self.server.approval.needed(self.tool.name, self.tool.read_only)

    def function(self) -> FunctionTool:
        """How the model sees it: a function like any other (the server runs it)."""
        description = self.tool.description or f"A tool of the MCP server {self.server.label}."
        return FunctionTool(name=self.tool.name, description=description, parameters=self.tool.input_schema)
