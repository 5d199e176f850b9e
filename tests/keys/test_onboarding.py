"""Bulk onboarding (``companies import``): companies with their first keys in batches, idempotent by
slug, every row checked before anything is written."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys

import pytest

from ucp_gateway.keys import KekRing, list_keys, onboarding
from ucp_gateway.keys.onboarding import ImportFileError, ProgressBar, import_companies, parse_rows
from ucp_gateway.tenancy import create_company, get_company, list_subagents, resolve_host

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
RING = KekRing.parse(KekRing.new_entry("kek-1"))


def test_csv_and_json_lines_read_the_same_rows():
    csv_text = "slug,name,hosts,tier\nacme,Acme Inc,acme.example www.acme.example,pro\n\nbolt,,,\n"
    jsonl = (
        '{"slug": "acme", "name": "Acme Inc", "hosts": ["acme.example", "www.acme.example"], "tier": "pro"}\n'
        '\n{"slug": "bolt"}\n'
    )
    for text in (csv_text, jsonl):
        rows = parse_rows(text)
        assert [(r.slug, r.name, r.hosts, r.tier) for r in rows] == [
            ("acme", "Acme Inc", ("acme.example", "www.acme.example"), "pro"),
            ("bolt", "bolt", (), "starter"),
        ]
    assert parse_rows('slug,hosts\nc,"a.example;b.example, c.example"\n')[0].hosts == (
        "a.example",
        "b.example",
        "c.example",
    )


def test_malformed_rows_are_named_by_line():
    with pytest.raises(ImportFileError) as e:
        parse_rows('{"slug": "ok"}\n{"slug": 3}\nnot json\n[1]\n{"slug": "x", "hosts": 7}\n')
    assert [n for n, _ in e.value.errors] == [2, 3, 4, 5]
    with pytest.raises(ImportFileError, match="slug column"):
        parse_rows("name,hosts\nAcme,acme.example\n", fmt="csv")
    with pytest.raises(ImportFileError, match="unknown column"):
        parse_rows("slug,colour\nacme,red\n", fmt="csv")
    with pytest.raises(ImportFileError) as e:
        parse_rows("slug,name\nacme,Acme,extra\n", fmt="csv")
    assert e.value.errors[0][0] == 2 and e.value.code == "invalid_import_file"


def test_invalid_and_duplicate_rows_are_all_reported():
    rows = parse_rows("slug,hosts,tier\nacme,a.example,\nBad Slug,,\nacme,,\nbolt,a.example,\ncore,,platinum\n")
    with pytest.raises(ImportFileError) as e:
        onboarding.plan(rows)
    lines = dict(e.value.errors)
    assert set(lines) == {3, 4, 5, 6}
    assert "line 2" in lines[4] and "a.example" in lines[5] and "tier" in lines[6]


async def test_import_creates_companies_with_keys_and_is_idempotent(database):
    text = "".join(f"co-{i:04d},Company {i},co-{i:04d}.example,growth\n" for i in range(1200))
    entries = parse_rows("slug,name,hosts,tier\n" + text)
    seen = []
    report = await import_companies(
        database.pool, entries, ring=RING, now=NOW, batch=500, progress=lambda d, t: seen.append((d, t))
    )
    assert len(report.created) == 1200 and report.keys == 1200 and report.existing == [] and not report.conflicts
    assert seen == [(0, 1200), (500, 1200), (1000, 1200), (1200, 1200)]
    c = await resolve_host(database.pool, "co-0777.example")
    assert (c.slug, c.display_name, c.tier) == ("co-0777", "Company 777", "growth")
    keys = await list_keys(database.pool, c.id)
    assert [k.state.value for k in keys] == ["active"] and keys[0].kek_id == "kek-1"
    assert set((await list_subagents(database.pool, c.id)).values()) == {True}
    # again, with two rows more: only those are created
    more = parse_rows("slug,hosts\n" + "co-0001,co-0001.example\nnew-1,new-1.example\nnew-2,\n")
    again = await import_companies(database.pool, entries + more[1:], ring=RING, now=NOW)
    assert sorted(again.created) == ["new-1", "new-2"] and len(again.existing) == 1200
    # the same slug with another host is an existing company, skipped (idempotent by slug)
    same = await import_companies(database.pool, more[:1], ring=RING, now=NOW)
    assert same.existing == ["co-0001"] and same.created == []


async def test_a_bad_row_or_a_host_of_another_company_writes_nothing(database):
    await create_company(database.pool, slug="taken", display_name="Taken", hostnames=["taken.example"])
    entries = parse_rows("slug,hosts\nfirst,first.example\nsecond,taken.example\n")
    with pytest.raises(ImportFileError) as e:
        await import_companies(database.pool, entries, ring=RING, now=NOW)
    assert e.value.errors == [(3, "hostname taken.example is bound to company taken")]
    with pytest.raises(Exception, match="unknown company"):
        await get_company(database.pool, "first")


async def test_a_company_created_meanwhile_is_reported_and_the_rest_created(database, monkeypatch):
    """Between the directory read and the write another writer takes a slug: the batch is rolled
    back and its companies are created one at a time, the taken one reported."""
    entries = parse_rows("slug\na\nb\nc\n")
    await create_company(database.pool, slug="b", display_name="B")

    async def stale(pool, rows):  # what the directory said before the other writer committed
        return set(), {}

    monkeypatch.setattr(onboarding, "_directory", stale)
    report = await import_companies(database.pool, entries, ring=RING, now=NOW)
    assert sorted(report.created) == ["a", "c"] and report.conflicts == {"b": "slug taken meanwhile"}
    assert report.keys == 2
    assert await list_keys(database.pool, (await get_company(database.pool, "b")).id) == []  # untouched


async def test_without_a_ring_companies_come_without_keys(database):
    report = await import_companies(database.pool, parse_rows("slug\nlater\n"), ring=None, now=NOW)
    assert report.created == ["later"] and report.keys == 0
    assert await list_keys(database.pool, (await get_company(database.pool, "later")).id) == []


def test_progress_bar_draws_on_a_terminal_only():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = ProgressBar(stream)
        bar(5, 10)
        bar(10, 10)
    assert pipe.getvalue() == ""
    assert "\r[###############---------------] 5/10 companies" in tty.getvalue()
    assert tty.getvalue().endswith("\n") and "10/10" in tty.getvalue()


def test_cli_import_from_a_jsonl_file(db_settings, tmp_path):
    path = tmp_path / "companies.jsonl"
    path.write_text("".join(json.dumps({"slug": f"s-{i}", "hosts": [f"s-{i}.example"]}) + "\n" for i in range(300)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCPGW_") and k != "DATABASE_URL"}
    env |= {
        "DATABASE_URL": db_settings.database_url,
        "UCPGW_ENVIRONMENT": "development",
        "UCPGW_KEYS_DIR": str(tmp_path / "keys"),
    }
    cmd = [sys.executable, "-m", "ucp_gateway.cli", "companies", "import", str(path), "--json", "--batch", "100"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert (out["created"], out["keys"], out["existing"]) == (300, 300, 0)
    assert p.stderr == ""  # no terminal: no progress bar
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["existing"] == 300
    bad = tmp_path / "bad.csv"
    bad.write_text("slug,hosts\nok,ok.example\nNOT OK,\n")
    p = subprocess.run([*cmd[:5], str(bad)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and p.stderr.startswith("ucp-gateway: error: 1 row(s) cannot be imported")
    assert "line 3" in p.stderr and "Traceback" not in p.stderr
