"""Catalogue snapshot the pure checkout logic prices against (the server is the price authority).

Plain frozen dataclasses; :mod:`.repo` loads them from the catalogue tables (migration 0002).
Money is integer minor units.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Address",
    "Catalog",
    "DiscountRule",
    "PickupLocation",
    "Product",
    "Promotion",
    "ShippingRate",
]


@dataclass(frozen=True)
class Product:
    id: str
    title: str
    price: int
    currency: str = "USD"
    image_url: str | None = None
    stock: int = 0


@dataclass(frozen=True)
class ShippingRate:
    id: str
    country_code: str  # ISO 3166-1 alpha-2 or "default"
    service_level: str
    price: int
    title: str
    currency: str = "USD"


@dataclass(frozen=True)
class Promotion:
    id: str
    type: str  # "free_shipping"
    min_subtotal: int | None
    eligible_item_ids: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class DiscountRule:
    code: str  # upper-case
    type: str  # "percentage" | "fixed_amount"
    value: int  # percent, or minor units
    description: str
    currency: str | None = None


@dataclass(frozen=True)
class Address:
    """A saved postal address of a known customer (offered as a shipping destination)."""

    id: str
    street_address: str
    city: str
    state: str
    postal_code: str
    country: str

    def to_destination(self) -> dict:
        return {
            "id": self.id,
            "street_address": self.street_address,
            "address_locality": self.city,
            "address_region": self.state,
            "postal_code": self.postal_code,
            "address_country": self.country,
        }


@dataclass(frozen=True)
class PickupLocation:
    id: str
    name: str
    address: dict


@dataclass(frozen=True)
class Catalog:
    """What one checkout computation may read. ``products`` holds at least the requested ids."""

    currency: str = "USD"
    products: dict[str, Product] = field(default_factory=dict)
    rates: tuple[ShippingRate, ...] = ()
    promotions: tuple[Promotion, ...] = ()
    discounts: dict[str, DiscountRule] = field(default_factory=dict)
    saved_addresses: tuple[Address, ...] = ()  # of the buyer, when the buyer is a known customer
    pickup_locations: tuple[PickupLocation, ...] = ()
