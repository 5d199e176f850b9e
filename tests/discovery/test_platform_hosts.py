"""The platform node on its own hosts, with a real ``serve --demo`` process over real sockets: the
platform host (the demo's ``platform.localhost``) serves it with URLs from the configured origin
whatever Host or X-Forwarded-Host a client sends, a company host still serves its own profile, and
any other Host is a JSON 404 on every path that used to answer the platform node."""

from __future__ import annotations

import json
import socket

import pytest

from ucp_gateway.config import Settings
from ucp_gateway.discovery.platform import platform_node
from ucp_gateway.errors import ConfigError

from ..faults.procs import Gateway, _postgres_procs

# every path that answered the platform node on a Host bound to no company
PLATFORM_PATHS = ("/.well-known/ucp", "/.well-known/ucp/2026-04-08", "/ucp/agent-graph", "/ucp/agent-graph?cursor=x")


def _raw(port: int, target: str, host: str, extra: str = "", method: str = "GET") -> tuple[int, dict, bytes]:
    """One HTTP/1.1 request with exactly these Host and header lines: (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("platform-hosts")
    gw = Gateway((tmp / "gw").resolve(), tmp / "gw.log", args=("--demo",)).start()
    try:
        gw.wait_listening()
        yield gw
    finally:
        gw.stop()
        for p in _postgres_procs(gw.data_dir):
            p.kill()


def test_the_platform_host_serves_the_node_with_urls_from_its_origin(demo) -> None:
    origin = f"http://platform.localhost:{demo.port}"
    status, headers, body = _raw(demo.port, "/.well-known/ucp", f"platform.localhost:{demo.port}")
    assert status == 200 and headers["content-type"].startswith("application/json")
    doc = json.loads(body)
    graph = doc["ucp"]["capabilities"]["com.solidnumber.agent_graph"][0]["config"]
    assert graph["pages"] == f"{origin}/ucp/agent-graph"
    assert doc["ucp"]["supported_versions"]["2026-04-08"] == f"{origin}/.well-known/ucp/2026-04-08"
    shop = next(c for c in graph["companies"] if c["slug"] == "flower-shop")
    assert shop["profile"] == f"http://127.0.0.1:{demo.port}/.well-known/ucp"
    # a spoofed Host spelling, port or X-Forwarded-Host changes no URL: the same bytes every time
    for host, extra in (
        ("PLATFORM.localhost", ""),
        ("platform.localhost:1", ""),
        ("platform.localhost.", ""),
        (f"platform.localhost:{demo.port}", "X-Forwarded-Host: evil.example\r\n"),
        (f"platform.localhost:{demo.port}", "X-Forwarded-Host: evil.example:8443\r\nX-Forwarded-Proto: https\r\n"),
        (f"platform.localhost:{demo.port}", "Forwarded: host=evil.example;proto=https\r\n"),
    ):
        status, _, again = _raw(demo.port, "/.well-known/ucp", host, extra)
        assert status == 200 and again == body, (host, extra)
        assert b"evil" not in again and b":1/" not in again
    status, _, page = _raw(demo.port, "/ucp/agent-graph", "platform.localhost:1", "X-Forwarded-Host: evil.example\r\n")
    assert status == 200 and json.loads(page)["pages"] == f"{origin}/ucp/agent-graph"
    status, _, leaf = _raw(demo.port, "/.well-known/ucp/2026-04-08", "platform.localhost:1")
    assert status == 200 and b"evil" not in leaf and b":1/" not in leaf


def test_a_company_host_serves_its_own_profile_and_not_the_agent_graph(demo) -> None:
    for host in (f"localhost:{demo.port}", f"127.0.0.1:{demo.port}"):
        status, _, body = _raw(demo.port, "/.well-known/ucp", host, "X-Forwarded-Host: evil.example\r\n")
        doc = json.loads(body)
        assert status == 200 and "dev.ucp.shopping" in doc["ucp"]["services"], host
        assert b"evil" not in body
        status, _, body = _raw(demo.port, "/ucp/agent-graph", host)
        assert status == 404 and json.loads(body)["code"] == "not_found", host


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8080", "[::1]:8080", "10.0.0.1", "platform.localhost.evil"]
)
def test_any_other_host_is_a_json_404_on_every_platform_path(demo, host) -> None:
    for target in PLATFORM_PATHS:
        for method in ("GET", "HEAD"):
            status, headers, body = _raw(demo.port, target, host, method=method)
            assert status == 404 and headers["content-type"].startswith("application/json"), (target, method)
            if method == "GET":
                err = json.loads(body)
                assert err["code"] == "not_found" and "companies" not in body.decode(), target
    # twice: a 404 is never cached as a document, and the platform host still answers after it
    assert _raw(demo.port, "/.well-known/ucp", host)[0] == 404
    assert _raw(demo.port, "/.well-known/ucp", "platform.localhost")[0] == 200


def test_platform_settings_are_checked_and_derive_each_other() -> None:
    node = platform_node(Settings(platform_origin="https://Platform.Example:8443/"))
    assert node.origin == "https://platform.example:8443" and node.hosts == {"platform.example"}
    assert node.serves("PLATFORM.example.:9") and not node.serves("shop.example")
    assert node.link_port == 8443
    node = platform_node(Settings(platform_hosts=("a.example", "B.example"), public_scheme="http", public_port=8080))
    assert node.origin == "http://a.example:8080" and node.hosts == {"a.example", "b.example"}
    both = platform_node(Settings(platform_hosts=("edge.example",), platform_origin="https://platform.example"))
    assert both.hosts == {"edge.example"} and both.origin == "https://platform.example"
    none = platform_node(Settings())
    assert none.hosts == frozenset() and not none.serves("anything.example")
    for bad in ("ftp://p.example", "https://", "https://u@p.example", "https://p.example/x", "https://p.example?q",
                "https://p.example#f", "p.example", "https://p.example:99999"):  # fmt: skip
        with pytest.raises(ConfigError):
            platform_node(Settings(platform_origin=bad))
    with pytest.raises(ConfigError):
        platform_node(Settings(platform_hosts=("p.example:8080",)))
