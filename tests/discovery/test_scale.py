"""Discovery for any of many companies costs what one company's costs: rendered profiles revalidated
by the company's version (migration 0092) and rendered from one statement, a cache sized by memory
that evicts, directory pages that read their own rows, host lookups that evict."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time

import asyncpg
import pytest
from aiohttp import web

from ucp_gateway.appkeys import CLOCK, DATABASE, SETTINGS
from ucp_gateway.clock import FrozenClock
from ucp_gateway.discovery import SubagentSummary
from ucp_gateway.discovery.profile_cache import ENTRY_OVERHEAD, RenderedProfiles
from ucp_gateway.discovery.web import SUBAGENT_PROVIDER, setup
from ucp_gateway.hostcache import HostCache
from ucp_gateway.keys import KekRing, Vault, attach_vault, ensure_active_key, rotate
from ucp_gateway.tenancy import SUBAGENTS, create_company, list_companies, resolve_host

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


class CountingPool:
    """The app pool, counting the connections taken from it and the statements sent on it directly."""

    def __init__(self, pool: asyncpg.Pool):
        self._pool, self.acquired = pool, 0

    def acquire(self, *args, **kwargs):
        self.acquired += 1
        return self._pool.acquire(*args, **kwargs)

    async def fetchval(self, *args, **kwargs):
        self.acquired += 1
        return await self._pool.fetchval(*args, **kwargs)

    async def fetchrow(self, *args, **kwargs):
        self.acquired += 1
        return await self._pool.fetchrow(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._pool, name)


async def _version(pool, company_id):
    from ucp_gateway.discovery.web import _versions

    return (await _versions(pool, [company_id])).get(company_id)


async def _revalidated(cache: RenderedProfiles) -> None:
    """Until the cache's revalidation read (if any) is done (at most 5 s)."""
    for _ in range(500):
        await asyncio.sleep(0.01)
        if cache._revalidating is None:
            return


@pytest.fixture
def vault(database):
    v = Vault(KekRing.parse(KekRing.new_entry("kek-1")))
    attach_vault(database.pool, v)
    return v


async def test_the_version_changes_with_what_the_profile_shows_and_only_for_that_company(database, vault):
    a = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    b = await create_company(database.pool, slug="bolt", display_name="Bolt")
    seen = {c.id: await _version(database.pool, c.id) for c in (a, b)}
    assert None not in seen.values()

    async def changed(step) -> bool:
        await step()
        now = {c.id: await _version(database.pool, c.id) for c in (a, b)}
        assert now[b.id] == seen[b.id]  # the other company's stays
        moved, seen[a.id] = now[a.id] != seen[a.id], now[a.id]
        return moved

    assert await changed(lambda: ensure_active_key(database.pool, a.id, now=NOW))
    assert await changed(lambda: rotate(database.pool, a.id, actor="t", reason="r", now=NOW))
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        assert await changed(
            lambda: owner.execute("UPDATE subagents SET enabled = false WHERE name = 'ar' AND company_id = $1", a.id)
        )
        assert await changed(lambda: owner.execute("INSERT INTO company_hosts VALUES ('www.acme.example', $1)", a.id))
        assert await changed(lambda: owner.execute("UPDATE companies SET settings = '{\"x\": 1}' WHERE id = $1", a.id))
        assert not await changed(lambda: owner.execute("SELECT 1"))
        await owner.execute("DELETE FROM companies WHERE id = $1", a.id)  # its rows go with it, no error
        assert await owner.fetchval("SELECT count(*) FROM profile_versions WHERE company_id = $1", a.id) == 0
    finally:
        await owner.close()


def _app(database, settings, renders: list) -> web.Application:
    async def counting(company, subagent):
        renders.append(subagent)
        return SubagentSummary()

    app = web.Application()
    app[SETTINGS] = settings
    app[CLOCK] = FrozenClock()
    app[DATABASE] = database
    app[SUBAGENT_PROVIDER] = counting
    setup(app)
    return app


async def test_a_stale_profile_is_renewed_by_its_version_and_rendered_again_when_it_changed(
    aiohttp_client, database, db_settings, vault
):
    c = await create_company(
        database.pool,
        slug="acme",
        display_name="Acme",
        hostnames=["acme.example"],
        subagents={n: n == "sales" for n in SUBAGENTS},
    )
    await ensure_active_key(database.pool, c.id, now=NOW)
    pool = CountingPool(database.pool)
    renders: list[str] = []
    settings = db_settings.model_copy(update={"profile_render_ttl": 0.1})
    client = await aiohttp_client(_app(dataclasses.replace(database, pool=pool), settings, renders))
    first = await client.get("/.well-known/ucp", headers={"Host": "acme.example"})
    assert first.status == 200 and len(renders) == 1  # one enabled sub-agent summarised: one render
    # a miss reads the host's company, then the profile's parts in one statement of one round trip
    assert pool.acquired == 2
    etag, before = first.headers["ETag"], pool.acquired
    for _ in range(3):  # stale: served, and renewed by one version read, no render
        await asyncio.sleep(0.12)
        again = await client.get("/.well-known/ucp", headers={"Host": "acme.example"})
        assert again.headers["ETag"] == etag
        await asyncio.sleep(0.02)
    assert len(renders) == 1 and pool.acquired - before == 3
    await rotate(database.pool, c.id, actor="t", reason="r", now=NOW)  # a new pending key: a new version
    await asyncio.sleep(0.12)
    await client.get("/.well-known/ucp", headers={"Host": "acme.example"})  # stale, while it renders
    await asyncio.sleep(0.05)
    fresh = await client.get("/.well-known/ucp", headers={"Host": "acme.example"})
    assert fresh.headers["ETag"] != etag and len(renders) == 2
    assert len((await fresh.json())["signing_keys"]) == 2


async def test_the_cache_holds_a_memory_budget_and_evicts_the_oldest():
    async def versions(ids):
        return {}

    cache = RenderedProfiles(60, versions, max_bytes=3 * (100 + ENTRY_OVERHEAD + 2 * 34))
    for i in range(5):

        async def render(i=i):
            return b"x" * 100, None, None

        await cache.get(f"h{i}", render)
    assert len(cache) == 3 and [cache.fresh(f"h{i}") is not None for i in range(5)] == [False, False, True, True, True]
    assert cache.bytes == 3 * (100 + ENTRY_OVERHEAD + 2 * 34) and cache.bytes <= cache.max_bytes

    async def big():
        return b"y" * 10_000, None, None

    await cache.get("big", big)  # larger than the budget: kept alone, the newest
    assert len(cache) == 1 and cache.fresh("big") is not None


async def test_directory_pages_walk_every_company_once_in_slug_order(database):
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        await owner.execute(
            "INSERT INTO companies (id, slug, display_name) SELECT gen_random_uuid(), 'co-' || lpad(i::text, 4, '0'),"
            " 'Co ' || i FROM generate_series(1, 250) i"
        )
        await owner.execute(
            "INSERT INTO company_hosts SELECT slug || '.example', id FROM companies UNION ALL"
            " SELECT 'www.' || slug || '.example', id FROM companies WHERE slug < 'co-0010'"
        )
    finally:
        await owner.close()
    seen, after = [], None
    while page := await list_companies(database.pool, after_slug=after, limit=100):
        seen.extend(page)
        after = page[-1].slug
    assert [c.slug for c in seen] == [f"co-{i:04d}" for i in range(1, 251)]
    assert seen[0].hostnames == ("co-0001.example", "www.co-0001.example") and seen[99].hostnames == (
        "co-0100.example",
    )
    assert (await resolve_host(database.pool, "www.co-0002.example")).hostnames == seen[1].hostnames


async def test_host_lookups_evict_the_oldest_not_all(database):
    for slug in ("a", "b", "c"):
        await create_company(database.pool, slug=slug, display_name=slug, hostnames=[f"{slug}.example"])
    cache = HostCache(ttl=60, max_entries=2)
    for slug in ("a", "b", "c"):
        assert (await cache.resolve(database.pool, f"{slug}.example")).slug == slug
    assert cache.cached("a.example") is HostCache.MISS
    assert cache.cached("b.example").slug == "b" and cache.cached("c.example").slug == "c"


async def test_stale_hosts_are_revalidated_together_in_one_read(database):
    """Past its ttl a Host is still answered (one more ttl at most) while ONE read revalidates every
    such Host: unchanged ones are renewed, a changed company's is dropped and resolved again."""
    a = await create_company(database.pool, slug="a", display_name="A", hostnames=["a.example"])
    b = await create_company(database.pool, slug="b", display_name="B", hostnames=["b.example"])
    pool = CountingPool(database.pool)
    cache = HostCache(ttl=0.2)
    for host in ("a.example", "b.example", "nobody.example"):
        await cache.resolve(pool, host)
    owner = await asyncpg.connect(database.owner_dsn)
    try:
        await owner.execute("UPDATE companies SET signature_policy = 'off' WHERE id = $1", b.id)
    finally:
        await owner.close()
    await asyncio.sleep(0.21)
    pool.acquired = 0
    assert cache.cached("a.example").id == a.id and cache.cached("nobody.example") is None  # stale, answered
    assert cache.cached("b.example").signature_policy == "required"  # the old answer, while revalidated
    for _ in range(50):
        await asyncio.sleep(0.01)
        if cache._revalidating is None:
            break
    assert pool.acquired == 1  # three Hosts, one read
    assert cache.cached("a.example").id == a.id and cache.cached("nobody.example") is None  # renewed: fresh
    assert cache.cached("b.example") is HostCache.MISS  # changed: resolved again by its next request
    assert (await cache.resolve(pool, "b.example")).signature_policy == "off"
    await asyncio.sleep(0.45)  # past the grace (two ttl since it was renewed) nothing is answered from it
    assert cache.cached("a.example") is HostCache.MISS


async def test_the_fast_path_answers_a_stale_profile_while_its_version_is_read(
    aiohttp_client, database, db_settings, vault
):
    from ucp_gateway.app import create_app

    c = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    await ensure_active_key(database.pool, c.id, now=NOW)
    settings = db_settings.model_copy(update={"profile_render_ttl": 0.2, "host_cache_ttl": 60})
    app = create_app(settings, database=database)
    client = await aiohttp_client(app)
    first = await client.get("/.well-known/ucp", headers={"Host": "acme.example"})
    assert first.status == 200
    await asyncio.sleep(0.21)
    stale = await client.get("/.well-known/ucp", headers={"Host": "acme.example"})
    assert stale.headers["ETag"] == first.headers["ETag"]
    from ucp_gateway.discovery.web import _RENDERED

    await _revalidated(app[_RENDERED])
    assert app[_RENDERED].fresh("acme.example") is not None  # renewed by the version read
    await rotate(database.pool, c.id, actor="t", reason="r", now=NOW)
    await asyncio.sleep(0.21)
    await client.get("/.well-known/ucp", headers={"Host": "acme.example"})  # stale: its check drops it
    await _revalidated(app[_RENDERED])
    fresh = await client.get("/.well-known/ucp", headers={"Host": "acme.example"})
    assert fresh.headers["ETag"] != first.headers["ETag"] and len((await fresh.json())["signing_keys"]) == 2


async def test_a_host_is_known_to_the_fast_path_longer_than_its_company_is_cached(database):
    """known() (enough for a public document cached per Host) lasts known_grace; cached() (what a
    decision reads) ttl and one more while revalidated."""
    await create_company(database.pool, slug="a", display_name="A", hostnames=["a.example"])
    cache = HostCache(ttl=0.1, known_grace=5.0)
    await cache.resolve(database.pool, "a.example")
    assert not cache.known("other.example")
    entry = cache._entries["a.example"]
    entry[0] = time.monotonic() - 1.0  # 1 s past its ttl
    assert cache.cached("a.example") is HostCache.MISS  # too old to decide anything with
    assert cache.known("a.example")  # ... but known, and being revalidated
    for _ in range(50):
        await asyncio.sleep(0.01)
        if cache._revalidating is None:
            break
    assert cache.cached("a.example").slug == "a"  # renewed: unchanged
    # in place: a renewal leaves nothing new for the garbage collector's oldest generation
    assert cache._entries["a.example"] is entry


async def test_a_host_asked_for_its_documents_only_is_read_as_often_as_they_are_rendered(database):
    """known() queues a revalidation only once the entry is known_ttl old (the documents' render
    ttl), not at ttl: hosts asked for their profiles only are read once per render ttl; cached()
    (what a decision reads) still queues at ttl, and revalidating() says only what a read covers."""
    await create_company(database.pool, slug="a", display_name="A", hostnames=["a.example"])
    cache = HostCache(ttl=0.1, known_grace=30.0, known_ttl=5.0)
    await cache.resolve(database.pool, "a.example")
    entry = cache._entries["a.example"]
    entry[0] = time.monotonic() - 1.0 + cache.ttl  # read 1 s ago: past ttl, within known_ttl
    assert cache.known("a.example")
    assert cache._revalidating is None and not cache._stale  # no read for a document's Host yet
    assert not cache.revalidating("a.example")  # so the documents' cache reads for itself
    entry[0] = time.monotonic() - 6.0 + cache.ttl  # read 6 s ago: past known_ttl
    assert cache.known("a.example") and cache.revalidating("a.example")  # queued: a read covers it
    for _ in range(50):
        await asyncio.sleep(0.01)
        if cache._revalidating is None:
            break
    assert not cache.revalidating("a.example") and cache.cached("a.example").slug == "a"  # renewed
    entry[0] = time.monotonic() - 0.15 + cache.ttl  # read 0.15 s ago: past ttl
    assert cache.cached("a.example").slug == "a" and cache.revalidating("a.example")  # a decision: at ttl


async def test_a_large_revalidation_read_hands_its_results_on_between_turns_of_the_loop(database):
    """A read of a thousand stale Hosts renews them in chunks, a turn of the event loop between two:
    requests in flight are answered while it renews, not after the whole batch (a stall)."""
    cache = HostCache(ttl=0.1)
    await cache.resolve(database.pool, "nobody.example")  # sets the pool; an unknown Host: the platform
    hosts = [f"h{i}.nobody.example" for i in range(3 * HostCache._CHUNK)]
    for host in hosts:
        cache._put(host, [time.monotonic() - 0.05, None, None])  # stale, within its grace
        assert cache.cached(host) is None  # answered stale, queued
    assert cache._revalidating is not None
    seen: list[int] = []

    async def request_in_flight() -> None:
        while cache._revalidating is not None:
            now = time.monotonic()
            seen.append(sum(cache._entries[h][0] > now for h in hosts))  # renewed so far
            await asyncio.sleep(0)

    await asyncio.wait_for(request_in_flight(), 5.0)
    assert cache._reading == frozenset()
    assert all(cache.cached(h) is None and cache._entries[h][0] > time.monotonic() for h in hosts)
    # the other task ran while the batch was part renewed: between its chunks
    assert any(0 < n < len(hosts) for n in seen), seen


async def test_hosts_falling_due_one_by_one_are_revalidated_a_few_reads_per_ttl(database, monkeypatch):
    """Under load Hosts fall due one by one; a revalidation waits GATHER of ttl for more before its
    read, so they are read together, not in back-to-back reads of the few that fell due during the
    last (at ten thousand hosts: a hundred reads a second of PostgreSQL's and the gateway's time)."""
    import ucp_gateway.hostcache as hostcache

    reads: list[int] = []
    real = hostcache.host_versions

    async def counted(pool, names):
        reads.append(len(names))
        return await real(pool, names)

    monkeypatch.setattr(hostcache, "host_versions", counted)
    cache = HostCache(ttl=0.2)
    await cache.resolve(database.pool, "nobody.example")  # sets the pool; an unknown Host: the platform
    hosts = [f"h{i}.nobody.example" for i in range(200)]
    start = time.monotonic()
    window = 0.4  # one Host falls due every 2 ms
    for i, host in enumerate(hosts):
        cache._put(host, [start + window * i / len(hosts), None, None])
    end = start + window + 0.3
    while time.monotonic() < end:  # requests for every Host, a turn of the loop apart
        for host in hosts:
            assert cache.cached(host) is None
        await asyncio.sleep(0.001)
    while cache._revalidating is not None:
        await asyncio.sleep(0.01)
    assert sum(reads) >= len(hosts)  # every Host was read
    # a read per GATHER (an eighth) of ttl at most, and the last few: not a read per Host or two
    assert len(reads) <= (end - start) / (cache.ttl / 8) + 3, reads


async def test_profiles_falling_due_one_by_one_are_revalidated_a_few_reads_per_ttl():
    """The rendered profiles' own revalidation gathers as the host cache's does: entries falling due
    one by one under load are read together, a read per eighth of ttl at most."""
    import uuid

    from ucp_gateway.discovery.profile_cache import Entry

    reads: list[int] = []
    read: set = set()
    version = uuid.uuid4()

    async def versions(ids):
        reads.append(len(ids))
        read.update(ids)
        await asyncio.sleep(0.001)  # a read's round trip
        return dict.fromkeys(ids, version)

    cache = RenderedProfiles(0.2, versions, grace=30.0)
    keys = [f"p{i}.example" for i in range(200)]
    companies = [uuid.uuid4() for _ in keys]
    start = time.monotonic()
    window = 0.4
    for i, key in enumerate(keys):
        cache._store(key, Entry(start + window * i / len(keys), b"{}", '"e"', companies[i], version))
    end = start + window + 0.3
    while time.monotonic() < end:
        for key in keys:
            if cache.fresh(key) is None:
                assert cache.stale(key) is not None
        await asyncio.sleep(0.001)
    while cache._revalidating is not None:
        await asyncio.sleep(0.01)
    assert read == set(companies)  # every company's version was read
    assert len(reads) <= (end - start) / (cache.ttl / 8) + 3, reads


async def test_stale_profiles_of_many_companies_are_revalidated_in_one_read(
    aiohttp_client, database, db_settings, vault
):
    """Past their ttl the profiles of many companies are answered while ONE read asks for all their
    versions (it was a read per Host): unchanged ones are renewed as they were, a changed one is
    dropped and rendered again by its next request."""
    from ucp_gateway.discovery.web import _RENDERED

    companies = [
        await create_company(database.pool, slug=f"co{i}", display_name=f"Co {i}", hostnames=[f"co{i}.example"])
        for i in range(6)
    ]
    for c in companies:
        await ensure_active_key(database.pool, c.id, now=NOW)
    pool = CountingPool(database.pool)
    renders: list[str] = []
    settings = db_settings.model_copy(update={"profile_render_ttl": 0.2})
    app = _app(dataclasses.replace(database, pool=pool), settings, renders)
    client = await aiohttp_client(app)
    tags = {}
    for c in companies:
        r = await client.get("/.well-known/ucp", headers={"Host": c.hostnames[0]})
        tags[c.slug] = r.headers["ETag"]
    await rotate(database.pool, companies[0].id, actor="t", reason="r", now=NOW)
    await asyncio.sleep(0.21)
    pool.acquired, rendered = 0, len(renders)
    cache = app[_RENDERED]
    # six answers in one turn of the loop (what the fast path does under load): all stale, all queued
    assert all(cache.stale(c.hostnames[0]) is not None for c in companies)
    await _revalidated(cache)
    assert pool.acquired == 1 and len(renders) == rendered  # six companies, one read, no render
    assert all(cache.fresh(c.hostnames[0]) is not None for c in companies[1:])
    assert cache.fresh("co0.example") is None  # changed: dropped
    for c in companies[1:]:  # renewed as they were
        assert (await client.get("/.well-known/ucp", headers={"Host": c.hostnames[0]})).headers["ETag"] == tags[c.slug]
    again = await client.get("/.well-known/ucp", headers={"Host": "co0.example"})
    assert again.headers["ETag"] != tags["co0"] and len((await again.json())["signing_keys"]) == 2


async def test_every_served_version_shares_one_memory_budget(aiohttp_client, database, db_settings, vault):
    """The root's and the older version's documents are one cache: one budget, the oldest out first."""
    from ucp_gateway.discovery.web import _RENDERED
    from ucp_gateway.versions import ROOT, SERVED, VERSIONS

    leaf = next(v for v in SERVED if v != ROOT)
    for i in range(2):
        c = await create_company(database.pool, slug=f"co{i}", display_name=f"Co {i}", hostnames=[f"co{i}.example"])
        await ensure_active_key(database.pool, c.id, now=NOW)
    client = await aiohttp_client(_app(database, db_settings, []))
    cache = client.server.app[_RENDERED]
    for path in ("/.well-known/ucp", VERSIONS[leaf].profile_path):
        assert (await client.get(path, headers={"Host": "co0.example"})).status == 200
    assert set(cache._entries) == {"co0.example", (leaf, "co0.example")}
    assert cache.bytes == sum(e.size for e in cache._entries.values())
    cache.max_bytes = cache.bytes  # full: the next document evicts the oldest (co0's root)
    assert (await client.get("/.well-known/ucp", headers={"Host": "co1.example"})).status == 200
    assert list(cache._entries) == [(leaf, "co0.example"), "co1.example"] and cache.bytes <= cache.max_bytes


async def test_agent_graph_pages_read_narrow_rows_and_the_platform_document_embeds_a_short_first_page(
    aiohttp_client, database, db_settings, monkeypatch
):
    """The platform node's document embeds at most PROFILE_PAGE companies; its ``next`` cursor
    leads to pages of ``agent_graph_page_size``; each link is the company's first hostname in
    code-point order (an IPv6 literal bracketed), at the request's port."""
    import ucp_gateway.discovery.web as discovery_web

    hosts = {"a": ["zz.example", "a-b.example"], "b": ["2001:db8::5"], "c": [], "d": ["d.example"], "e": ["e.example"]}
    for slug, names in hosts.items():
        await create_company(database.pool, slug=slug, display_name=slug.upper(), hostnames=names)
    monkeypatch.setattr(discovery_web, "PROFILE_PAGE", 2)
    settings = db_settings.model_copy(update={"agent_graph_page_size": 2, "public_scheme": "http", "public_port": 8080})
    client = await aiohttp_client(_app(database, settings, []))
    doc = await (await client.get("/.well-known/ucp", headers={"Host": "platform.test:8080"})).json()
    first = doc["ucp"]["capabilities"]["com.solidnumber.agent_graph"][0]["config"]
    assert first["companies"] == [
        {"slug": "a", "name": "A", "profile": "http://a-b.example:8080/.well-known/ucp"},
        {"slug": "b", "name": "B", "profile": "http://[2001:db8::5]:8080/.well-known/ucp"},
    ]
    settings.agent_graph_page_size = 3
    page = await (await client.get(first["next"].split(":8080", 1)[1], headers={"Host": "platform.test:8080"})).json()
    assert [c["slug"] for c in page["companies"]] == ["c", "d", "e"] and page["next"] is None
    assert page["companies"][0] == {"slug": "c", "name": "C"}  # no host, no profile
    assert page["pages"] == "http://platform.test:8080/ucp/agent-graph"


async def test_the_host_caches_revalidation_renews_that_hosts_profile_without_a_read_of_its_own(
    aiohttp_client, database, db_settings, vault
):
    """A Host the host cache revalidated at an unchanged version has its rendered profile renewed
    with it: a company asked for in turn costs one revalidation, not two."""
    from ucp_gateway.app import create_app
    from ucp_gateway.discovery.web import _RENDERED
    from ucp_gateway.middleware import HOST_CACHE

    c = await create_company(database.pool, slug="acme", display_name="Acme", hostnames=["acme.example"])
    await ensure_active_key(database.pool, c.id, now=NOW)
    settings = db_settings.model_copy(update={"profile_render_ttl": 1.0, "host_cache_ttl": 0.5})
    app = create_app(settings, database=database)
    client = await aiohttp_client(app)
    rendered = app[_RENDERED]
    reads = []
    versions = rendered._versions
    rendered._versions = lambda ids: reads.append(ids) or versions(ids)  # the documents' own reads
    assert (await client.get("/.well-known/ucp", headers={"Host": "acme.example"})).status == 200
    await asyncio.sleep(1.05)  # past the profile's ttl, and the Host's known_ttl (the same)
    assert (await client.get("/.well-known/ucp", headers={"Host": "acme.example"})).status == 200  # both stale
    hosts = app[HOST_CACHE]
    for _ in range(300):
        await asyncio.sleep(0.01)
        if hosts._revalidating is None:
            break
    assert rendered.fresh("acme.example") is not None and rendered._revalidating is None
    assert reads == []  # renewed by the Host's read: none of its own
    await rotate(database.pool, c.id, actor="t", reason="r", now=NOW)  # a new version: not vouched for
    entry = app[_RENDERED]._entries["acme.example"]
    app[_RENDERED].vouch("acme.example", c.id, await _version(database.pool, c.id), time.monotonic() + 60)
    assert entry.expires < time.monotonic() + 30


async def test_an_entrys_prepared_headers_are_no_work_for_the_garbage_collector():
    """Ten thousand entries each holding two header maps made every full collection traverse them
    (a stall of every request in flight): the prepared headers are plain tuples it does not track."""
    import gc

    from aiohttp.test_utils import make_mocked_request

    from ucp_gateway.discovery.profile_cache import Entry

    entry = Entry(time.monotonic() + 60, b"{}", '"e"')
    response = entry.response(make_mocked_request("GET", "/.well-known/ucp", headers={"Host": "a"}), 300)
    assert response.status == 200 and response.headers["ETag"] == '"e"'
    assert list(response.headers) == ["Cache-Control", "ETag", "Content-Type"]
    gc.collect()
    gc.collect()  # a tuple is untracked once its items are: the inner pairs on the first pass
    assert not gc.is_tracked(entry.headers) and not gc.is_tracked(entry.not_modified)


async def test_a_revalidated_profile_entry_is_renewed_in_place():
    """A renewal at an unchanged version changes the entry's deadline and order, and allocates no
    new entry (ten thousand renewed every ttl fed the garbage collector's full collections)."""
    import uuid

    company, version = uuid.uuid4(), uuid.uuid4()
    reads: list[list] = []

    async def versions(ids):
        reads.append(ids)
        return {company: version}

    async def render():
        return b"{}", company, version

    cache = RenderedProfiles(0.05, versions)
    first = await cache.get("a.example", render)
    await cache.get("b.example", render)
    await asyncio.sleep(0.06)
    assert cache.fresh("a.example") is None and cache.stale("a.example") is first
    await _revalidated(cache)
    assert reads == [[company]] and cache.fresh("a.example") is first
    assert list(cache._entries) == ["b.example", "a.example"]  # renewed: the last to go
    assert cache.bytes == sum(e.size for e in cache._entries.values())


async def test_agent_graph_pages_render_any_display_name_as_json_and_are_reused(
    aiohttp_client, database, db_settings, monkeypatch
):
    """A page's JSON is built by PostgreSQL: quotes, backslashes, control characters and non-ASCII
    in a display name come out as the same string; a page asked for again within its ttl is served
    from its rendered bytes (no read), with the same ETag."""
    import ucp_gateway.discovery.graph as graph

    name = 'Q"uo\\te \t tab, caf\u00e9 \u2603 </script>'
    await create_company(database.pool, slug="odd", display_name=name, hostnames=["odd.example"])
    reads: list = []
    page_json = graph.page_json

    async def counting(*args):
        reads.append(args[1])
        return await page_json(*args)

    monkeypatch.setattr(graph, "page_json", counting)
    client = await aiohttp_client(_app(database, db_settings, []))
    first = await client.get("/ucp/agent-graph", headers={"Host": "platform.test"})
    page = await first.json()
    assert page["companies"] == [{"slug": "odd", "name": name, "profile": "https://odd.example/.well-known/ucp"}]
    again = await client.get("/ucp/agent-graph", headers={"Host": "platform.test"})
    assert again.headers["ETag"] == first.headers["ETag"] and await again.read() == await first.read()
    assert reads == [None]


async def test_a_walker_finds_the_next_agent_graph_page_read_ahead(aiohttp_client, database, db_settings, monkeypatch):
    """Serving a page starts the read of the one after it (one ahead, not the rest): following
    ``next`` finds it read; the platform document's embedded page reads nothing ahead."""
    import ucp_gateway.discovery.graph as graph

    for slug in "abcde":
        await create_company(database.pool, slug=slug, display_name=slug.upper(), hostnames=[f"{slug}.example"])
    reads: list = []
    page_json = graph.page_json

    async def counting(*args):
        reads.append((args[1], args[2]))
        return await page_json(*args)

    monkeypatch.setattr(graph, "page_json", counting)
    settings = db_settings.model_copy(update={"agent_graph_page_size": 2})
    client = await aiohttp_client(_app(database, settings, []))
    page = await (await client.get("/ucp/agent-graph", headers={"Host": "platform.test"})).json()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if len(reads) == 2:
            break
    assert reads == [(None, 2), ("b", 2)]  # the second page read ahead, not the third
    second = await (
        await client.get(page["next"].split("platform.test", 1)[1], headers={"Host": "platform.test"})
    ).json()
    assert [c["slug"] for c in second["companies"]] == ["c", "d"] and reads[1] == ("b", 2)
    await asyncio.sleep(0.05)
    assert reads[2:] == [("d", 2)]
    reads.clear()
    import ucp_gateway.discovery.web as discovery_web

    monkeypatch.setattr(discovery_web, "PROFILE_PAGE", 1)
    await client.get("/.well-known/ucp", headers={"Host": "platform.test"})
    await asyncio.sleep(0.05)
    assert reads == [(None, 1)]  # the embedded first page (its size), nothing ahead
