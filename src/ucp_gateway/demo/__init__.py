"""The flower-shop demo: company ``flower-shop`` and its catalogue, imported from ``demo/data``."""

from .seed import DEMO_HOSTNAMES, DEMO_SEEDERS, DEMO_SLUG, load_catalogue, seed_demo

__all__ = ["DEMO_HOSTNAMES", "DEMO_SEEDERS", "DEMO_SLUG", "load_catalogue", "seed_demo"]
