"""ucp-gateway: a Universal Commerce Protocol (UCP 2026-04-08) gateway for multi-tenant merchant platforms."""

__all__ = ["__version__"]

__version__ = "0.1.0"
