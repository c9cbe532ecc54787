"""Catalog data: GPUs, LLM architectures, GPU-hour prices and hosted-API prices.

The numbers live in YAML files under ``data/``; this package only defines their schema
(:mod:`fleetplan.catalogs.schema`) and loads, validates and merges them
(:mod:`fleetplan.catalogs.loader`).
"""

from fleetplan.catalogs.loader import Catalog, CatalogError, load_catalog
from fleetplan.catalogs.schema import GPU, LLM, APIPrice, GPUPrice, MoE, ReferencePrice

__all__ = [
    "GPU",
    "LLM",
    "APIPrice",
    "Catalog",
    "CatalogError",
    "GPUPrice",
    "MoE",
    "ReferencePrice",
    "load_catalog",
]
