"""UCP-Agent parsing (RFC 8941 dictionary; UCP signatures.md REST Request Verification steps 1-3)."""

from __future__ import annotations

import pytest

from ucp_gateway.discovery import InvalidProfileUrl, agent_from_meta, parse_ucp_agent


def test_parses_quoted_https_profile() -> None:
    agent = parse_ucp_agent('profile="https://platform.example/profiles/agent.json"')
    assert agent.profile == "https://platform.example/profiles/agent.json"
    assert agent.version is None


def test_keeps_parameters_and_version_member() -> None:
    agent = parse_ucp_agent('profile="https://p.example/x";v=1, version="2026-04-08", other=?1')
    assert agent.profile == "https://p.example/x"
    assert agent.params == {"v": 1}
    assert agent.version == "2026-04-08"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "   ",
        "profile=https://p.example/x",  # a token, not a quoted string
        'profile=("https://p.example/x")',  # inner list
        "profile=:aGVsbG8=:",  # byte sequence
        'version="2026-04-08"',  # no profile member
        'profile="https://p.example/x" garbage',  # not a dictionary
        'profile="http://p.example/x"',  # plain http
        'profile="ftp://p.example/x"',
        'profile="https:///no-host"',
        'profile="https://user:pw@p.example/x"',  # credentials
        'profile="https://p.example:99999/x"',  # bad port
        'profile="/relative/path"',
        'profile="https://p.example/\u00e9"',  # non-ASCII is not RFC 8941
        'profile="https://p.example/' + "a" * 2100 + '"',
    ],
)
def test_rejects_bad_headers(header: str | None) -> None:
    with pytest.raises(InvalidProfileUrl) as info:
        parse_ucp_agent(header)
    assert info.value.code == "invalid_profile_url"
    assert info.value.http_status == 400


def test_http_only_for_allowlisted_hosts() -> None:
    header = 'profile="http://127.0.0.1:8285/profiles/shopping-agent.json"'
    assert parse_ucp_agent(header, http_hosts=frozenset({"127.0.0.1"})).profile.startswith("http://127.0.0.1")
    with pytest.raises(InvalidProfileUrl):
        parse_ucp_agent(header, http_hosts=frozenset({"localhost"}))


def test_mcp_meta_form() -> None:
    agent = agent_from_meta({"ucp-agent": {"profile": "https://p.example/agent"}})
    assert agent.profile == "https://p.example/agent"
    for bad in (
        None,
        {},
        {"ucp-agent": "x"},
        {"ucp-agent": {"profile": 5}},
        {"ucp-agent": {"profile": "http://x"}},
    ):
        with pytest.raises(InvalidProfileUrl):
            agent_from_meta(bad)
