"""What every command module shares: the common options and the ``--json`` output.

Below the subsystems (it imports nothing of the gateway), so each subsystem's ``register(sub)``
module imports it at the top while :mod:`ucp_gateway.cli`, which imports those modules to build
its parser, sits above them all.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["common_parser", "emit"]


def common_parser() -> argparse.ArgumentParser:
    """Options every command accepts (add as ``parents=[common_parser()]``)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--data-dir", type=Path, help="gateway data directory (embedded database, dev keys)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    return p


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON (sorted keys, indent 2) when ``--json`` was given, else ``text``."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print(text)
