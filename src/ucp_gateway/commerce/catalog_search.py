"""Catalog search SQL (UCP catalog search): one statement a page, over the searchable catalogue
(migrations 0065, 0067, 0068, 0121). Thin: SQL only, no policy.

Every function takes a connection inside ``tenant_tx`` (RLS scopes it to one company). Rows are
the dicts of :mod:`.catalog_store` (``PRODUCT_COLUMNS``: the product with its ``variants``) plus
``sort_key``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import asyncpg

from .catalog_store import PRODUCT_COLUMNS

__all__ = ["RANK_CANDIDATES", "TERM_WORDS", "SearchQuery", "search_features", "search_rows", "term_words"]


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A validated search (catalog_api.parse_search). Money in minor units of ``currency``.

    ``sort``: relevance | price_asc | price_desc | title | newest. ``after``: the keyset of the last
    row of the previous page (``[sort value, id]``), None on the first page. ``fuzzy``: match word
    prefixes (the typo fallback); ``trgm``: rank by title trigram similarity (pg_trgm present).
    """

    text: str | None
    categories: tuple[str, ...] = ()
    price_min: int | None = None
    price_max: int | None = None
    currency: str | None = None
    available: bool | None = None
    sort: str = "relevance"
    limit: int = 10
    after: tuple[Any, str] | None = None
    fuzzy: bool = False
    trgm: bool = False


# sort -> (key expression, direction). Ties break on id ascending; relevance and price_desc
# compare their key descending. Relevance is catalog_rank (migration 0121: the sum of the weights
# of the query's lexemes in the product, by field); the typo fallback's prefixes match no lexeme
# exactly, so it ranks by ts_rank_cd ("prefix").
_SORTS = {
    "relevance": ("catalog_rank(p.search, {lexemes})::float8", "DESC"),
    "prefix": ("ts_rank_cd(p.search, {tsq}, 1)::float8", "DESC"),
    "trgm": ("similarity(lower(p.title), lower($2::text))::float8", "DESC"),
    "price_asc": ("p.min_price", "ASC"),
    "price_desc": ("p.min_price", "DESC"),
    "title": ("lower(p.title)", "ASC"),
    "newest": ("p.created_at", "DESC"),
}


def _tsquery(text: str, fuzzy: bool) -> tuple[str, str]:
    """``(SQL expression over $2, the parameter)``: websearch syntax, or (the typo fallback without
    pg_trgm) the first half of each word, at least 3 letters, as a prefix: ``tulpis`` -> ``tul:*``."""
    if not fuzzy:
        return "websearch_to_tsquery('english'::regconfig, $2::text)", text
    words = [w for w in "".join(c if c.isalnum() else " " for c in text.lower()).split() if w][:8]
    prefixes = [w[: max(3, len(w) // 2)] for w in words]
    return "to_tsquery('english'::regconfig, $2::text)", " & ".join(f"{p}:*" for p in prefixes) or "''"


# The planner prices a LIMIT of candidates by interpolation, as if the matches were spread evenly
# along any order it can walk: for a match of some hundreds of rows it chose a sequential scan or
# a walk of the price index that stops early, and read thousands of pages to find 100 matches
# (1,966 and 4,348 buffers; a lower random_page_cost only moved the walk from one to the other). The
# GIN bitmap is right for every text query (a very common word: its first pages in TID order), so
# the candidate statement is planned with bitmap scans only, and the defaults come back after it:
# over 150 filtered searches at 100,000 products the most buffers one took went from 1,966 to 759.
_BITMAP_ONLY = "SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off"
_PLANNER_DEFAULTS = "SET LOCAL enable_seqscan = DEFAULT; SET LOCAL enable_indexscan = DEFAULT"
#: At most this many matches are ranked per relevance query (see search_rows; docs/catalog.md).
RANK_CANDIDATES = 100
#: A relevance query of at most this many lexemes is answered from catalog_terms (term path).
TERM_WORDS = 6


def term_words(text: str) -> int:
    """How many lexeme scans the term path needs for ``text`` when it can answer it, else 0.

    The term path finds the products that have every lexeme of the query (migration 0068). For a
    query of words of letters only, none of them ``or``, ``websearch_to_tsquery`` is exactly the
    conjunction of those lexemes. A hyphenated word (``get-well``: letters joined by single
    hyphens) is a phrase of its compound and its parts; its products have all of those lexemes,
    and the term path then rechecks the exact phrase on each candidate. A word counts one scan,
    a hyphenated one itself and its parts; at most :data:`TERM_WORDS`. Anything else (quotes,
    ``-word``, ``OR``, digits and other punctuation) goes to the GIN index, which reads websearch
    syntax itself."""
    scans = 0
    for w in text.split():
        parts = w.split("-")
        if not all(p.isalpha() for p in parts) or w.lower() == "or":  # "" (a leading, doubled hyphen) too
            return 0
        scans += 1 if len(parts) == 1 else 1 + len(parts)
    return scans if scans <= TERM_WORDS else 0


#: the product columns catalog_terms carries (migration 0068): filters on them need no product read
_TERM_COLUMNS = ("p.min_price ", "p.max_price ", "p.currency ", "p.available ")


#: the query's lexemes (stemmed, stop words dropped, distinct): what catalog_rank weighs
_LEXEMES = "tsvector_to_array(to_tsvector('english'::regconfig, $2::text))"
_PHRASE_TSQ = ", websearch_to_tsquery('english'::regconfig, $2::text) AS tsq"


def _term_candidates(words: int, where: list[str], phrase: bool) -> str:
    """The candidate CTE of the term path: products having every lexeme of $2 (one ordered
    index-only scan of catalog_terms per word, merge-joined, in product id order), filtered, the
    first RANK_CANDIDATES of them, each with its relevance: the sum of its terms' weights, read
    from the same index entries (catalog_rank's value, migration 0121). Filters on the price
    range, currency and availability are checked on the first scan's entries (they carry those
    columns); catalog_products is read only for the other filters (categories). The query's
    lexemes are computed once (``q``); a word that is a stop word or repeats another's lexeme joins
    the first lexeme again (harmless) and adds no weight. ``phrase``: the query has a hyphenated
    word, and each candidate's tsvector is checked against the query's tsquery (word order)."""
    joins = "".join(
        f" JOIN catalog_terms t{i} ON t{i}.company_id = t1.company_id AND t{i}.product_id = t1.product_id"
        f" AND t{i}.lexeme = (SELECT coalesce(q.l[{i}], q.l[1]) FROM q)"
        for i in range(2, words + 1)
    )
    key = "t1.weight" + "".join(
        f" + CASE WHEN (SELECT q.l[{i}] FROM q) IS NULL THEN 0 ELSE t{i}.weight END" for i in range(2, words + 1)
    )
    conds = [("t1." + w[2:]) if w.startswith(_TERM_COLUMNS) else w for w in where]
    if phrase:  # the function, not the operator: never a GIN index condition (a scan of every match)
        conds.append("ts_match_vq(p.search, (SELECT q.tsq FROM q))")
    product = (
        " JOIN catalog_products p ON p.company_id = t1.company_id AND p.id = t1.product_id"
        if any(re.search(r"\bp\.", c) for c in conds)
        else ""
    )
    return (
        f"q AS MATERIALIZED (SELECT {_LEXEMES} AS l{_PHRASE_TSQ if phrase else ''}),"
        f" m AS MATERIALIZED (SELECT t1.product_id AS id, ({key})::float8 AS sort_key FROM catalog_terms t1{joins}"
        f"{product} WHERE t1.lexeme = (SELECT q.l[1] FROM q) AND {' AND '.join(conds)}"
        f" ORDER BY t1.product_id LIMIT {RANK_CANDIDATES})"
    )


async def search_rows(conn: asyncpg.Connection, q: SearchQuery) -> list[dict[str, Any]]:
    """One page (``q.limit + 1`` rows: the extra one says there is a next page) in one statement.
    Each row has ``sort_key`` (the keyset value for the next cursor).

    Relevance: the filters and the text match select at most :data:`RANK_CANDIDATES` products,
    which are ranked; a query that matches more (one common word over 100,000 products) is
    answered from those, so its cost stays bounded (ranking every match of a word in 20 % of a
    large catalogue took longer than the whole request budget). Plain words (:func:`term_words`)
    find their candidates in catalog_terms, in product id order, reading about as many index
    entries as it takes to find them (independent of the catalogue's size) and ranking them from
    the same entries; other queries in the GIN index's order, ranked by catalog_rank over the
    product's tsvector (the same value). Cursor pages of one query walk the same candidates.
    Other sorts walk every match in their index order."""
    sort = "trgm" if q.trgm else q.sort
    if q.text is None and sort == "relevance":
        sort = "title"
    key, direction = _SORTS[sort]
    args: list[Any] = [q.limit + 1]
    where = []
    words = term_words(q.text) if q.text is not None and sort == "relevance" and not q.fuzzy else 0
    if q.trgm:
        qparam = q.text
        where.append("lower(p.title) % lower($2::text)")
    elif words:
        qparam = q.text
    elif q.text is not None:
        # the GIN path: the tsquery is written in place (no CTE), so the planner sees a constant it
        # can look up in the GIN index (a CTE's value is unknown to it: a scan of the company)
        tsq, qparam = _tsquery(q.text, q.fuzzy)
        if q.fuzzy and sort == "relevance":
            key = _SORTS["prefix"][0].format(tsq=tsq)
        else:
            key = key.format(lexemes=_LEXEMES)
        where.append(f"p.search @@ {tsq}")
    else:
        qparam = None  # browse by filters ($2 unused but typed)
        where.append("$2::text IS NULL")
    args.append(qparam)

    def arg(v: Any) -> str:
        args.append(v)
        return f"${len(args)}"

    where.append("p.min_price IS NOT NULL")  # a product without variants is not sold
    keyset: list[str] = []
    if q.categories:
        where.append(f"p.categories && {arg(list(q.categories))}::text[]")
    if q.currency is not None and (q.price_min is not None or q.price_max is not None):
        where.append(f"p.currency = {arg(q.currency)}")
    if q.price_min is not None:
        where.append(f"p.max_price >= {arg(q.price_min)}")
    if q.price_max is not None:
        where.append(f"p.min_price <= {arg(q.price_max)}")
    if q.available is not None:
        where.append(f"p.available = {arg(q.available)}")
    if q.after is not None:
        op = "<" if direction == "DESC" else ">"
        cast = {"newest": "::timestamptz", "title": "::text"}.get(sort, "")
        if sort in ("relevance", "trgm"):
            cast = "::float8"
        elif sort in ("price_asc", "price_desc"):
            cast = "::bigint"
        k, i = arg(q.after[0]), arg(q.after[1])
        kx = "p.sort_key" if sort in ("relevance", "trgm") else key  # the ranked candidates carry theirs
        keyset.append(f"({kx} {op} {k}{cast} OR ({kx} = {k}{cast} AND p.id > {i}::text))")
    if sort in ("relevance", "trgm"):  # rank at most RANK_CANDIDATES matches (see the docstring)
        # ids and ranks only are carried through the ranking; the page's rows are read after it
        if words:
            candidates = _term_candidates(words, where, phrase="-" in q.text)
        else:
            candidates = (
                f"m AS MATERIALIZED (SELECT p.id, {key} AS sort_key FROM catalog_products p"
                f" WHERE {' AND '.join(where)} LIMIT {RANK_CANDIDATES})"
            )
        sql = (
            f"WITH {candidates},"
            f" top AS (SELECT * FROM m p{' WHERE ' + ' AND '.join(keyset) if keyset else ''}"
            f" ORDER BY p.sort_key {direction}, p.id LIMIT $1)"
            f" SELECT {PRODUCT_COLUMNS}, top.sort_key FROM top JOIN catalog_products p ON p.id = top.id"
            f" ORDER BY top.sort_key {direction}, p.id"
        )
        if words:  # ordered index-only scans need no planner settings
            return [dict(r) for r in await conn.fetch(sql, *args)]
        await conn.execute(_BITMAP_ONLY)
        rows = await conn.fetch(sql, *args)
        await conn.execute(_PLANNER_DEFAULTS)  # (an error aborts the transaction: its SET LOCAL goes too)
        return [dict(r) for r in rows]
    else:
        sql = (
            f"SELECT {PRODUCT_COLUMNS}, {key} AS sort_key FROM catalog_products p"
            f" WHERE {' AND '.join(where + keyset)} ORDER BY {key} {direction}, p.id LIMIT $1"
        )
    return [dict(r) for r in await conn.fetch(sql, *args)]


async def search_features(conn: asyncpg.Connection) -> tuple[bool, bool]:
    """``(pg_trgm installed, ts_match_vq LEAKPROOF)`` in this database: typo tolerance by trigrams
    (migration 0065 installs pg_trgm when available), and whether a text match can be a GIN index
    condition under row-level security (migration 0067 marks it when a superuser migrates)."""
    row = await conn.fetchrow(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') AS trgm,"
        " (SELECT proleakproof FROM pg_proc WHERE oid = 'ts_match_vq(tsvector, tsquery)'::regprocedure) AS gin"
    )
    return bool(row["trgm"]), bool(row["gin"])
