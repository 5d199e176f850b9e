"""The buyer rate limit: ``per_minute`` requests per (company, buyer agent), one budget for every
serving process of one ``serve``.

A sliding-window counter (the usual approximation): the count of the current minute window plus
the previous window's count weighted by the part of it still inside the last 60 s. Windows are
numbered ``floor(time.monotonic() / 60)``: CLOCK_MONOTONIC is one clock for every process of a
machine. A request is allowed iff that estimate, summed over every worker, is below the limit; a
refused request is not counted. As the token bucket this replaces, a buyer may spend the whole
minute's budget in one burst.

Memory: one block of ``HEADER + rows * buckets * BUCKET_BYTES`` bytes. Under ``serve --workers N``
the supervisor creates it in shared memory (:func:`create_shared_block`, ``rows = N``) and each
worker opens it by name (``RateLimiter(shared=name, row=index)``); a single process keeps one row
in its own memory. Each worker writes only its own row (no lock: a worker killed while holding a
cross-process lock would wedge the others) and reads every row. A row is a hash table of
``buckets`` buckets of ``WAYS`` entries; a bucket is ``WAYS`` 64-bit key fingerprints (0: empty)
then ``WAYS`` records ``(window number int64, count in that window uint32, count in the window
before uint32)``. A key lives in bucket ``fingerprint % buckets`` of every row that counted it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import struct
import time
import uuid
from multiprocessing import shared_memory

from ..errors import ConfigError

__all__ = [
    "BUCKETS",
    "WINDOW",
    "RateLimiter",
    "create_shared_block",
    "release_shared_block",
    "wait_time",
    "window_counts",
]

WINDOW = 60.0  # seconds: the limit is per minute
WAYS = 8  # entries per bucket
BUCKETS = 2048  # buckets per row: 16,384 keys counted at once per worker, 384 KiB a row
_MAGIC = b"UCPGWRL1"
_HEADER = struct.Struct("<8sII")  # magic, rows, buckets
HEADER = 64
_FPS = struct.Struct(f"<{WAYS}Q")
_REC = struct.Struct("<qII")  # window number, count in it, count in the window before it
_RECS = struct.Struct("<" + "qII" * WAYS)
_FP = struct.Struct("<Q")
_REC0 = 8 * WAYS  # offset of the records in a bucket
_RECSZ = _REC.size  # 16
BUCKET_BYTES = _REC0 + _RECSZ * WAYS  # 192
_fps_at, _rec_at = _FPS.unpack_from, _REC.unpack_from  # the hot path's lookups, bound once
_FP_MEMO_MAX = 4096
_LIMIT_MAX = 2**32 - 1 - 64  # counts are uint32; room for the race's extra requests (64 workers at most)


def window_counts(slot_window: int, current: int, previous: int, window: int) -> tuple[int, int]:
    """What an entry stored in window number ``slot_window`` (with ``current`` requests counted in
    it and ``previous`` in the window before) says about window number ``window``: ``(count in
    window, count in window - 1)``. An entry two or more windows old counts nothing."""
    if slot_window == window:
        return current, previous
    if slot_window == window - 1:
        return 0, current
    return 0, 0


def wait_time(current: int, previous: int, limit: int, elapsed: float) -> float:
    """Seconds until one more request is allowed (0.0: allowed now).

    Args:
        current: requests counted in the current window (every worker).
        previous: requests counted in the previous window (every worker).
        limit: requests per ``WINDOW`` (>= 1).
        elapsed: seconds since the current window began, in [0, WINDOW).
    Allowed iff ``current + previous * (WINDOW - elapsed) / WINDOW < limit``; otherwise the answer
    is the time until that holds if nothing else is counted meanwhile (> 0, the infimum: allowed
    just after it): later in this window while ``current < limit``, else in the next window, where
    ``current`` becomes the previous count.
    """
    if current + previous * (WINDOW - elapsed) / WINDOW < limit:
        return 0.0
    if current < limit:  # previous > 0 here; its weight must drop below limit - current
        wait = WINDOW * (1.0 - (limit - current) / previous) - elapsed
    else:
        wait = WINDOW - elapsed + WINDOW * (1.0 - limit / current)
    return max(wait, 1e-6)  # refused at the boundary itself: never 0, which means allowed


def _block_size(rows: int, buckets: int) -> int:
    return HEADER + rows * buckets * BUCKET_BYTES


def create_shared_block(rows: int, *, buckets: int = BUCKETS) -> shared_memory.SharedMemory:
    """Create the named shared memory block of ``rows`` workers' counters (``serve --workers``).

    The name (``.name``, e.g. ``ucpgw_rl_<pid>_<hex>``) is what workers pass as ``shared``. The
    creator must :func:`release_shared_block` it; if the creator is killed, multiprocessing's
    resource tracker unlinks it once every process holding the tracker (the creator and the
    workers it spawned) has exited. Raises ConfigError when the block cannot be created or its
    memory reserved (a full /dev/shm would otherwise kill a worker with SIGBUS on first write);
    ValueError when ``rows`` < 1 or ``buckets`` is not a power of two.
    """
    if rows < 1 or buckets < 1 or buckets & (buckets - 1):
        raise ValueError("rows >= 1 and buckets a power of two")
    size = _block_size(rows, buckets)
    name = f"ucpgw_rl_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    except OSError as exc:
        raise ConfigError(f"cannot create the rate limiter's shared memory ({size} bytes): {exc.strerror}") from None
    try:
        fd = getattr(shm, "_fd", -1)
        if fd >= 0 and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        _HEADER.pack_into(shm.buf, 0, _MAGIC, rows, buckets)
    except OSError as exc:
        release_shared_block(shm)
        raise ConfigError(f"cannot reserve the rate limiter's shared memory ({size} bytes): {exc.strerror}") from None
    return shm


def release_shared_block(shm: shared_memory.SharedMemory) -> None:
    """Close and unlink a block made by :func:`create_shared_block` (idempotent)."""
    shm.close()
    with contextlib.suppress(FileNotFoundError):  # already unlinked
        shm.unlink()


class RateLimiter:
    """Sliding-window limit per (company, buyer agent): ``per_minute`` requests a minute.

    Args:
        per_minute: the limit (``Settings.buyer_rate_limit``), >= 1; above 2**32 - 65 it is that.
        shared: name of a block from :func:`create_shared_block` to count in (a worker of
            ``serve --workers``); None: a private one-row block (one process).
        row: this process's row in ``shared`` (the worker index); only this process writes it.
        buckets: buckets per row of a private block (a shared block says its own).
    Raises: ConfigError when ``shared`` cannot be opened, is not such a block or has no ``row``;
    ValueError for ``per_minute`` < 1 or ``buckets`` not a power of two.

    Every worker reads every row, so no lock is needed, at a benign race: takes of one key that
    run at the same instant in different workers each read the others' counts before their
    increments land, so with N workers at most N - 1 requests beyond the limit pass at once (a
    reader may also catch an entry mid-update, off by that entry's counts for that instant). When
    a key's bucket in this worker's row holds ``WAYS`` other keys counted in the last two windows,
    the one with the smallest count is forgotten (in this row), which only loosens its limit; two
    keys with the same 64-bit fingerprint share one budget, which only tightens it.
    """

    def __init__(self, per_minute: int, *, shared: str | None = None, row: int = 0, buckets: int = BUCKETS):
        if per_minute < 1:
            raise ValueError("per_minute must be >= 1")
        self.limit = min(per_minute, _LIMIT_MAX)
        self._shm: shared_memory.SharedMemory | None = None
        if shared is None:
            if buckets < 1 or buckets & (buckets - 1):
                raise ValueError("buckets must be a power of two")
            rows = 1
            self._buf = memoryview(bytearray(_block_size(rows, buckets)))
            _HEADER.pack_into(self._buf, 0, _MAGIC, rows, buckets)
        else:
            try:
                self._shm = shared_memory.SharedMemory(name=shared)
            except OSError as exc:
                raise ConfigError(f"cannot open the rate limiter's shared memory {shared!r}: {exc.strerror}") from None
            self._buf = self._shm.buf
            magic, rows, buckets = _HEADER.unpack_from(self._buf, 0)
            if magic != _MAGIC or len(self._buf) < _block_size(rows, buckets) or not 0 <= row < rows:
                self.close()
                raise ConfigError(f"{shared!r} is not a rate limiter block with a row {row}")
        self._mask = buckets - 1
        row_bytes = buckets * BUCKET_BYTES
        self._own = HEADER + row * row_bytes
        # this process's row first: its entry is the one rewritten after an allowed request
        self._rows = (self._own, *(HEADER + r * row_bytes for r in range(rows) if r != row))
        self._fps: dict[tuple[uuid.UUID, str], int] = {}

    def _fingerprint(self, key: tuple[uuid.UUID, str]) -> int:
        # the same 64 bits in every process (hash() is salted per process); 0 marks an empty slot
        fp = self._fps.get(key)
        if fp is None:
            digest = hashlib.blake2b(key[0].bytes + key[1].encode(), digest_size=8).digest()
            fp = int.from_bytes(digest, "little") or 1
            if len(self._fps) >= _FP_MEMO_MAX:  # bounded memo of the keys seen lately
                self._fps.clear()
            self._fps[key] = fp
        return fp

    def take(self, key: tuple[uuid.UUID, str], now: float | None = None) -> float:
        """Count one request of ``key`` = (company id, caller) if allowed.

        ``now``: seconds of ``time.monotonic()`` (tests pass their own). Returns 0.0 when allowed
        (and counted), else the seconds until one request will be (nothing counted).
        """
        now = time.monotonic() if now is None else now
        window = int(now // WINDOW)
        fp = self._fingerprint(key)
        buf, bucket = self._buf, (fp & self._mask) * BUCKET_BYTES
        current = previous = mine_c = mine_p = 0
        mine = -1  # this key's slot in this process's row
        for base in self._rows:
            off = base + bucket
            fps = _fps_at(buf, off)
            if fp in fps:
                i = fps.index(fp)
                c, p = window_counts(*_rec_at(buf, off + _REC0 + i * _RECSZ), window)
                current += c
                previous += p
                if base == self._own:
                    mine, mine_c, mine_p = i, c, p
        wait = wait_time(current, previous, self.limit, now - window * WINDOW)
        if wait:
            return wait
        off = self._own + bucket
        if mine >= 0:
            _REC.pack_into(buf, off + _REC0 + mine * _RECSZ, window, mine_c + 1, mine_p)
        else:
            i = self._free_slot(off, window)
            _REC.pack_into(buf, off + _REC0 + i * _RECSZ, window, 1, 0)
            _FP.pack_into(buf, off + 8 * i, fp)
        return 0.0

    def _free_slot(self, off: int, window: int) -> int:
        """The slot of this row's bucket at ``off`` for a new key: empty, else counting nothing
        in ``window`` or the one before, else the one with the fewest requests (forgotten)."""
        fps = _FPS.unpack_from(self._buf, off)
        recs = _RECS.unpack_from(self._buf, off + _REC0)
        best, best_n = 0, None
        for i in range(WAYS):
            if fps[i] == 0:
                return i
            c, p = window_counts(recs[3 * i], recs[3 * i + 1], recs[3 * i + 2], window)
            if c + p == 0:
                return i
            if best_n is None or c + p < best_n:
                best, best_n = i, c + p
        return best

    def close(self) -> None:
        """Detach from the shared block (never unlinks it); the limiter is unusable afterwards."""
        if self._shm is not None:
            self._shm.close()  # releases self._buf, the block's own memoryview
            self._shm = None
