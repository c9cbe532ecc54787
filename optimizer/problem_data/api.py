"""Hosted-API prices for a product's token mix.

Owns the choice of a product's API offer and its price per token; it does not decide how much traffic goes there (the MIP does)."""

from __future__ import annotations

from dataclasses import dataclass

from fleetplan.catalogs.loader import Catalog, InputError, nearest
from fleetplan.catalogs.schema import APIPrice
from fleetplan.optimizer.traffic.scenario import Product


@dataclass(frozen=True)
class APIOffer:
    """The API a product may burst to and its blended price per output token."""

    price: APIPrice
    usd_per_output_token: float

    @property
    def usd_per_million_output_tokens(self) -> float:
        """Blended price per million output tokens (input, cached input and output included)."""
        return self.usd_per_output_token * 1e6


def blended_usd_per_output_token(price: APIPrice, product: Product) -> float:
    """API cost of one request divided by its output tokens.

    A request costs input x (hit x cached price + (1 - hit) x input price) + output x output
    price, per million tokens; without a cached-input price, cached tokens pay the input price.
    """
    hit = product.prefix_cache_hit_rate
    cached = price.cached_input_usd_per_million_tokens
    cached = price.input_usd_per_million_tokens if cached is None else cached
    per_request = (
        product.input_tokens * (hit * cached + (1 - hit) * price.input_usd_per_million_tokens)
        + product.output_tokens * price.output_usd_per_million_tokens
    ) / 1e6
    return per_request / product.output_tokens


def resolve_api(product: Product, catalog: Catalog) -> APIOffer | None:
    """The product's API offer: the named API entry, or the cheapest provider of the named model."""
    if product.api is None:
        return None
    ident = product.api.model
    where = f"products[{product.name}].api.model"
    if ident in catalog.api_prices:
        entry = catalog.api_prices[ident]
        return APIOffer(entry, blended_usd_per_output_token(entry, product))
    offers = [a for a in catalog.api_prices.values() if a.model == ident]
    if not offers:
        choices = list(catalog.api_prices) + sorted({a.model for a in catalog.api_prices.values()})
        raise InputError(f"{where}: no API price for {ident!r}{nearest(ident, choices)}")
    best = min(offers, key=lambda a: (blended_usd_per_output_token(a, product), a.id))
    return APIOffer(best, blended_usd_per_output_token(best, product))
