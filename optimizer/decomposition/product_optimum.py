"""A product's proven optimum without a solver, per decode and prefill-pool GPU type, where the
rule plan is exact: no API, hours not merged, every tier split feasible.

Without an API a product's decode and its prefill pool are independent: each hour needs the
fewest whole replicas that alone meet its demand (more only cost more), the spot share caps
decode replica-hours only, and the cheapest split of a configuration's hourly needs into a
reserved level, spot and on-demand is found by enumerating the level
(:func:`~fleetplan.optimizer.decomposition.portfolio.split_by_tier`). So the optimum of every choice is the
cost of its decode split plus that of its pool split, and the optimum over the choices that run
on given GPU types is the cheapest decode split there plus the cheapest pool split there.

This module computes those optima (:func:`optima_by_types`) with the GPUs any plan of such a
choice runs for certain in each hour; it does not search, solve or plan a group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetplan.optimizer.problem_data.candidates import Candidate, PoolCandidate
from fleetplan.optimizer.common.defaults import CEILING_TOLERANCE
from fleetplan.optimizer.common.enums import PrefillMode
from fleetplan.optimizer.problem_data.problem import FleetProblem, ProductData

Choice = tuple[Candidate | None, PoolCandidate | None]
GPURows = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class TypeOptimum:
    """The proven optimum of a product over the choices with decode on ``decode_gpu`` and, in pool
    mode, the pool on ``pool_gpu`` (None: colocated prefill): its cost in USD per month, the
    choice that reaches it, and the GPUs per type that every plan of those choices runs in each
    hour (the fewest of any configuration there, decode and pool), and of those its decode GPUs."""

    decode_gpu: str
    pool_gpu: str | None
    cost_usd: float
    choice: Choice
    certain_gpus: GPURows
    decode_gpus: tuple[int, ...]


def exact_by_rule(prob: FleetProblem, pd: ProductData) -> bool:
    """Whether the rule plans of the product are its exact optima: no API, hours not merged."""
    return not pd.has_api and not prob.hour_counts and bool(pd.candidates)


def needs(pd: ProductData, parts: list[Any], pool: bool) -> Any:
    """Per part (rows) and hour (columns), the fewest replicas that alone meet the hour's demand:
    :meth:`ProductData.replica_bound` (decode) or :meth:`ProductData.pool_bound` (``pool``),
    computed for all at once."""
    d = np.asarray(pd.demand_tokens_per_s, dtype=float)
    if pool:
        work = d * pd.prefill_flops_per_output_token
        per = np.array([k.usable_flops_per_s for k in parts], dtype=float)
    else:
        work = d
        per = np.array([c.usable_tokens_per_s for c in parts], dtype=float)
    out = np.maximum(0, np.ceil(work[None, :] / per[:, None] - CEILING_TOLERANCE)).astype(int)
    return out if not pool else np.where(work[None, :] > 0, out, 0)


def split_costs(prob: FleetProblem, parts: list[Any], need: Any, capped: bool) -> dict[str, float]:
    """USD per month of the cheapest tier split of each part's hourly needs (rows of ``need``),
    by key; parts without a feasible split are left out."""
    from fleetplan.optimizer.decomposition.portfolio import split_by_tier

    cap = prob.spot_max_share if capped and prob.spot_max_share < 1.0 else None
    out = {}
    for x, row in zip(parts, need):
        split = split_by_tier(row, {t: x.usd_per_replica_hour_in(t) for t in prob.tiers}, prob.hours_per_month,
                              prob.hour_weight, cap)
        if split is not None:
            out[x.key] = split.cost_usd
    return out


def _fewest(parts: list[Any], need: dict[str, Any]) -> tuple[int, ...]:
    """Per hour, the fewest GPUs of any of ``parts`` that alone meet the hour's need."""
    return tuple(int(v) for v in np.min([x.gpus_per_replica * need[x.key] for x in parts], axis=0))


def _cheapest(parts: list[Any], costs: dict[str, float]) -> tuple[float, Any] | None:
    """The part of lowest cost (first by key among equals), with its cost; None if none is priced."""
    priced = sorted(((costs[x.key], x.key, x) for x in parts if x.key in costs), key=lambda t: (t[0], t[1]))
    return (priced[0][0], priced[0][2]) if priced else None


def _rows(*parts: tuple[str, tuple[int, ...]]) -> GPURows:
    """GPU rows of several parts, summed per type, sorted by type."""
    out: dict[str, tuple[int, ...]] = {}
    for gpu, row in parts:
        out[gpu] = tuple(a + b for a, b in zip(out[gpu], row)) if gpu in out else row
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class PartOptimum:
    """The cheapest tier split of a product's decode configurations on ``gpu`` in one prefill mode
    (``pool``: pool-mode decode; else colocated), or of its pool configurations on ``gpu``: its
    cost in USD per month, the configuration, and the fewest GPUs of any of them in each hour."""

    gpu: str
    pool: bool
    cost_usd: float
    part: Any
    gpus: tuple[int, ...]


def part_optima(prob: FleetProblem, name: str) -> tuple[list[PartOptimum], list[PartOptimum]]:
    """Per decode GPU type and prefill mode, and per pool GPU type, the product's cheapest split
    (:class:`PartOptimum`; decode first, then pools, each sorted by type). Without an API (see
    :func:`exact_by_rule`) decode and pool are independent, so a product's optimum on a decode
    type in pool mode and a pool type is the sum of the two."""
    pd = prob.products[name]
    dec_need = needs(pd, list(pd.candidates), pool=False)
    pool_need = needs(pd, list(pd.pool), pool=True) if pd.pool else np.zeros((0, prob.hours), dtype=int)
    dec = split_costs(prob, list(pd.candidates), dec_need, capped=True)
    pool = split_costs(prob, list(pd.pool), pool_need, capped=False)
    need = {**dict(zip((c.key for c in pd.candidates), dec_need)), **dict(zip((k.key for k in pd.pool), pool_need))}
    decode = []
    for gpu in sorted({c.gpu for c in pd.candidates}):
        for in_pool in (False, True):
            cands = [c for c in pd.candidates if c.gpu == gpu and (c.mode == PrefillMode.POOL) == in_pool]
            best = _cheapest(cands, dec)
            if best is not None:
                decode.append(PartOptimum(gpu, in_pool, best[0], best[1], _fewest(cands, need)))
    pools = []
    for gpu in sorted({k.gpu for k in pd.pool}):
        ks = [k for k in pd.pool if k.gpu == gpu]
        at = _cheapest(ks, pool)
        if at is not None:
            pools.append(PartOptimum(gpu, True, at[0], at[1], _fewest(ks, need)))
    return decode, pools


def optima_by_types(prob: FleetProblem, name: str) -> list[TypeOptimum]:
    """Every (decode GPU type, pool GPU type or None) the product can run on, with its proven
    optimum there (see the module docstring); sorted by types. Only valid where
    :func:`exact_by_rule` holds."""
    fixed = prob.products[name].fixed_monthly_usd
    decode, pools = part_optima(prob, name)
    out = []
    for d in decode:
        row = (d.gpu, d.gpus)
        if not d.pool:
            out.append(TypeOptimum(d.gpu, None, d.cost_usd + fixed, (d.part, None), _rows(row), d.gpus))
            continue
        for k in pools:
            out.append(TypeOptimum(d.gpu, k.gpu, d.cost_usd + k.cost_usd + fixed, (d.part, k.part),
                                   _rows(row, (k.gpu, k.gpus)), d.gpus))
    return out


def own_optimum(prob: FleetProblem, name: str) -> TypeOptimum | None:
    """The product's proven optimum over every choice (the cheapest of :func:`optima_by_types`,
    first by types among equals), or None where :func:`exact_by_rule` does not hold or no choice
    has a plan."""
    pd = prob.products[name]
    if not exact_by_rule(prob, pd):
        return None
    optima = optima_by_types(prob, name)
    return min(optima, key=lambda o: o.cost_usd) if optima else None


def best_pool(prob: FleetProblem, pd: ProductData) -> PoolCandidate | None:
    """The product's pool configuration whose cheapest tier split of its hourly needs costs least
    (first by key among equals; without an API the pool of its optimum), or None without pools."""
    if not pd.pool:
        return None
    costs = split_costs(prob, list(pd.pool), needs(pd, list(pd.pool), pool=True), capped=False)
    best = _cheapest(list(pd.pool), costs)
    return best[1] if best is not None else None
