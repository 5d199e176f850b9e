"""Real gateway processes for the fault suite: ``ucp-gateway serve`` subprocesses on their own
embedded PostgreSQL, with JSON log lines read back from a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..test_cli import CLI, _free_port, _postgres_procs

__all__ = ["Gateway", "_free_port", "_postgres_procs"]


class Gateway:
    """One ``serve`` process (``--workers N`` when asked) on ``data_dir``; ``log``: its stderr."""

    def __init__(self, data_dir: Path, log: Path, *, port: int | None = None, args: tuple[str, ...] = (), env=None):
        self.data_dir, self.log = data_dir, log
        self.port = port or _free_port()
        self.args, self.env_extra = args, env or {}
        self.proc: subprocess.Popen | None = None

    def start(self) -> Gateway:
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("UCPGW_")}
        env.update({"UCPGW_LOG_LEVEL": "info", "UCPGW_ENVIRONMENT": "development", **self.env_extra})
        with self.log.open("a") as err:
            self.proc = subprocess.Popen(
                [*CLI, "serve", "--data-dir", str(self.data_dir), "--port", str(self.port), *self.args],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
            )
        return self

    def events(self) -> list[dict]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    def wait_for(self, pred, timeout: float = 90.0, *, after: int = 0) -> dict:
        """The first log event (from index ``after``) matching ``pred``; fails on timeout or exit."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((e for e in self.events()[after:] if pred(e)), None)
            if hit is not None:
                return hit
            assert self.proc is not None and self.proc.poll() is None, f"gateway exited: {self.tail()}"
            time.sleep(0.1)
        raise AssertionError(f"timed out; log tail: {self.tail()}")

    def wait_listening(self, timeout: float = 90.0) -> None:
        """Until ``/readyz`` answers 200 (fails when the process exits first)."""
        deadline = time.monotonic() + timeout
        while self.get("/readyz")[0] != 200:
            assert self.proc is not None and self.proc.poll() is None, f"gateway exited: {self.tail()}"
            assert time.monotonic() < deadline, self.tail()
            time.sleep(0.1)

    def get(self, path: str, headers: dict | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, b""

    def tail(self) -> str:
        return self.log.read_text()[-3000:]

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "pg" / "postmaster.pid").read_text().splitlines()[0])

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait (a clean stop). Returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"no clean stop within {timeout} s: {self.tail()}") from None
