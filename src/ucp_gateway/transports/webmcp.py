from __future__ import annotations

__all__ = ["setup_routes"]


def setup_routes(app):
    pass
