"""Which MCP server URLs a session may reach (``S2S_MCP_ALLOWED_URLS``), and the tool filters of an entry."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from realtime.protocol.mcp.config import McpPolicy, normalize_url, parse_server
from realtime.protocol.wire import EventError

POLICY = McpPolicy(("https://mcp.internal/tools", "http://127.0.0.1:8080"))


@pytest.mark.parametrize(
    "url, allowed",
    [
        ("https://mcp.internal/tools", True),
        ("https://mcp.internal/tools/weather/mcp", True),
        ("https://mcp.internal:443/tools/mcp", True),  # the default port, written out
        ("https://mcp.internal/toolsmith", False),  # a prefix of the path, not a folder under it
        ("https://mcp.internal/", False),
        ("http://mcp.internal/tools", False),  # another scheme
        ("https://mcp.internal.evil.example/tools", False),  # a host that only starts the same
        ("https://user:secret@mcp.internal/tools", False),  # credentials in the URL
        ("https://mcp.internal:8443/tools", False),
        ("http://127.0.0.1:8080/anything", True),
        ("http://127.0.0.1:8081/", False),
        ("http://127.0.0.1/", False),
        ("file:///etc/passwd", False),
        ("http://[::1:bad/", False),
    ],
)
def test_a_url_is_allowed_only_under_a_prefix_with_the_same_scheme_host_and_port(url, allowed):
    assert POLICY.allows(url) is allowed


def test_no_prefixes_turn_mcp_off():
    assert not McpPolicy().enabled and not McpPolicy().allows("https://mcp.internal/tools")


def test_filters_and_approvals_follow_the_ga_shapes():
    entry = {
        "type": "mcp",
        "server_label": "s",
        "server_url": "http://127.0.0.1:8080/mcp",
        "allowed_tools": {"tool_names": ["a", "b"], "read_only": True},
        "require_approval": {"never": {"tool_names": ["a"]}, "always": {"tool_names": ["b"]}},
        "headers": {"X-Key": "k"},
        "authorization": "token",
    }
    server = parse_server(entry, "session.tools[0]", POLICY)
    assert server.allows("a", True) and not server.allows("a", False) and not server.allows("c", True)
    assert not server.approval.needed("a", None) and server.approval.needed("b", None)
    assert server.approval.needed("c", None)  # named by neither filter: approval, the default
    assert dict(server.headers) == {"X-Key": "k", "Authorization": "Bearer token"}
    assert "headers" not in server.echo and "authorization" not in server.echo  # secrets are not echoed
    assert parse_server({**entry, "require_approval": None}, "t", POLICY).approval.needed("a", True)


@pytest.mark.parametrize(
    "change, param",
    [
        ({"server_label": "no spaces"}, "t.server_label"),
        ({"server_url": None}, "t.server_url"),
        ({"allowed_tools": "get_weather"}, "t.allowed_tools"),
        ({"require_approval": "sometimes"}, "t.require_approval"),
        ({"require_approval": {"maybe": {}}}, "t.require_approval.maybe"),
        ({"headers": {"X": 1}}, "t.headers.X"),
        ({"tunnel_id": "tun_1"}, "t.tunnel_id"),
        ({"extra": 1}, "t.extra"),
    ],
)
def test_a_bad_entry_is_refused_naming_its_field(change, param):
    entry = {"type": "mcp", "server_label": "s", "server_url": "http://127.0.0.1:8080/mcp", **change}
    with pytest.raises(EventError) as caught:
        parse_server(entry, "t", POLICY)
    assert caught.value.param == param


ADMIN_POLICY = McpPolicy(("http://127.0.0.1:9100/mcp",))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9100/mcp/%2e%2e/internal-admin",  # what a receiving server resolves to /internal-admin
        "http://127.0.0.1:9100/mcp/%2E%2E/internal-admin",
        "http://127.0.0.1:9100/mcp/.%2e/internal-admin",
        "http://127.0.0.1:9100/mcp/../internal-admin",
        "http://127.0.0.1:9100/mcp/./tools",
        "http://127.0.0.1:9100/mcp/%2e/tools",
        "http://127.0.0.1:9100/mcp/..",
        "http://127.0.0.1:9100/mcp%2f..%2finternal-admin",
        "http://127.0.0.1:9100/mcp/%5c..%5cinternal-admin",
        "http://127.0.0.1:9100/mcp/\\../internal-admin",
        "http://127.0.0.1:9100/mcp/a b",
    ],
)
def test_a_server_url_with_a_dot_segment_written_or_encoded_is_refused_naming_its_param(url):
    entry = {"type": "mcp", "server_label": "s", "server_url": url}
    assert not ADMIN_POLICY.allows(url)
    with pytest.raises(EventError) as refused:
        parse_server(entry, "session.tools[0]", ADMIN_POLICY)
    assert refused.value.code == "invalid_value" and refused.value.param == "session.tools[0].server_url"


def test_a_server_url_is_compared_and_requested_as_normalised():
    entry = {"type": "mcp", "server_label": "s", "server_url": "HTTP://127.0.0.1:9100/mcp/%7euser/%41pi?q=%61"}
    assert parse_server(entry, "t", ADMIN_POLICY).url == "http://127.0.0.1:9100/mcp/~user/Api?q=a"
    assert normalize_url("http://127.0.0.1:9100/mcp/a%2fb") is None
    assert normalize_url("http://127.0.0.1:9100/mcp/%c3%a9") is None  # non-ASCII, even a plain letter


@pytest.mark.parametrize(
    "path",
    [
        "/mcp/..;/internal-admin",  # Tomcat and Spring drop the ';' parameter: /mcp/../internal-admin
        "/mcp/..;x=1/internal-admin",
        "/mcp;jsessionid=1/../internal-admin",
        "/mcp/%2e%2e%3b/internal-admin",
        "/mcp/%2e%2e%3B/internal-admin",
        "/mcp/%252e%252e/internal-admin",  # a server or proxy that decodes twice
        "/mcp/%25252e%25252e/internal-admin",
        "/mcp/%25%32%65%25%32%65/internal-admin",
        "/mcp%252f..%252finternal-admin",
        "/mcp/%255c..%255cinternal-admin",
        "/mcp/%253b/internal-admin",
        "/mcp/%c0%ae%c0%ae/internal-admin",  # overlong UTF-8 for '.', read as a dot by lenient decoders
        "/mcp/%c0%af..%c0%afinternal-admin",
        "/mcp/%e0%80%ae%e0%80%ae/internal-admin",
        "/mcp/\u2025/internal-admin",  # '‥', NFKC '..'
        "/mcp/\uff0e\uff0e/internal-admin",  # fullwidth full stops
        "/mcp/\ufe52\ufe52/internal-admin",
        "/mcp/..\uff0finternal-admin",  # fullwidth solidus
        "/mcp/..\u2215internal-admin",  # division slash, best-fit mapped to '/'
        "/mcp/%e2%80%a5/internal-admin",
        "/mcp/%ef%bc%8e%ef%bc%8e%ef%bc%8finternal-admin",
        "/mcp/%u002e%u002e/internal-admin",  # IIS's %u escapes
        "/mcp/%25u002e%25u002e/internal-admin",
        "/mcp/..%00/internal-admin",
        "/mcp/..%20/internal-admin",  # Windows drops trailing dots and spaces
        "/mcp/.../internal-admin",
        "/mcp/%zz",
        "/mcp/%2",
        "/mcp/%2525252561",  # five layers of encoding: more than any server should decode
    ],
)
def test_a_path_that_some_server_resolves_elsewhere_is_refused_as_written_and_as_httpx_sends_it(path):
    url = "http://127.0.0.1:9100" + path
    entry = {"type": "mcp", "server_label": "s", "server_url": url}
    assert normalize_url(url) is None and not ADMIN_POLICY.allows(url)
    assert not ADMIN_POLICY.allows(str(httpx.URL(url)))  # what the client's transport checks
    with pytest.raises(EventError) as refused:
        parse_server(entry, "session.tools[0]", ADMIN_POLICY)
    assert refused.value.code == "invalid_value" and refused.value.param == "session.tools[0].server_url"


@pytest.mark.parametrize(
    "path",
    [
        "/mcp",
        "/mcp/",
        "/mcp/v1.2/tools",
        "/mcp/.well-known/x",
        "/mcp/a..b",
        "/mcp/%7euser",
        "/mcp/a%20b",
        "/mcp/%25252561",  # four layers of encoding of 'a': the most a path may carry
    ],
)
def test_a_path_that_only_resolves_to_itself_is_still_allowed(path):
    assert ADMIN_POLICY.allows("http://127.0.0.1:9100" + path)


@pytest.mark.parametrize(
    "name, value",
    [
        ("Host", "internal-admin.local"),
        ("host", "internal-admin.local"),
        ("Content-Length", "0"),
        ("Transfer-Encoding", "chunked"),
        ("Connection", "close"),
        ("Keep-Alive", "timeout=5"),
        ("Upgrade", "websocket"),
        ("TE", "trailers"),
        ("Proxy-Authorization", "Basic x"),
        ("X Bad", "v"),
        ("X-Split", "a\r\nHost: internal-admin.local"),
    ],
)
def test_a_tool_may_not_set_a_header_that_frames_or_routes_the_request(name, value):
    entry = {"type": "mcp", "server_label": "s", "server_url": "http://127.0.0.1:9100/mcp", "headers": {name: value}}
    with pytest.raises(EventError) as refused:
        parse_server(entry, "session.tools[0]", ADMIN_POLICY)
    assert refused.value.code == "invalid_value" and refused.value.param == f"session.tools[0].headers.{name}"


@pytest.mark.parametrize(
    "name",
    [
        "X-Forwarded-Host",
        "x-forwarded-host",
        "X_Forwarded_Host",  # CGI and WSGI servers read it as X-Forwarded-Host
        "Forwarded",
        "X-Forwarded-For",
        "X-Forwarded-Proto",
        "X-Forwarded-Port",
        "X-Forwarded-Prefix",
        "X-Real-IP",
        "X-Original-URL",
        "X-Original-Host",
        "X-Rewrite-URL",
        "X-Host",
        "True-Client-IP",
        "X-Client-IP",
        "Via",
        "X-HTTP-Method-Override",
    ],
)
def test_a_tool_may_not_set_a_header_a_proxy_sets_refused_as_host_is(name):
    entry = {"type": "mcp", "server_label": "s", "server_url": "http://127.0.0.1:9100/mcp", "headers": {name: "x"}}
    with pytest.raises(EventError) as refused:
        parse_server(entry, "session.tools[0]", ADMIN_POLICY)
    with pytest.raises(EventError) as host:
        parse_server({**entry, "headers": {"Host": "x"}}, "session.tools[0]", ADMIN_POLICY)
    assert refused.value.code == host.value.code == "invalid_value"
    assert refused.value.param == f"session.tools[0].headers.{name}"
    assert refused.value.message == host.value.message.replace("Host", name)
