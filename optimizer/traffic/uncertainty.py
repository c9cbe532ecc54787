"""The ``uncertainty:`` block of a scenario: what may come true, each outcome with its probability.

Owns the schema of the block, its validation (one line naming the field and the nearest valid
choice) and the outcomes it stands for: listed ones (``outcomes:``, probabilities summing to 1) or
ones drawn from distributions (``sample:``, a count and a seed: the same draws on every machine).
It plans nothing; :mod:`fleetplan.optimizer.decisions.stochastic` plans against the outcomes.

An outcome overrides the base scenario with:

    demand_scale           every product's QPS (a number) or some products' (a mapping by name)
                           multiplied by this, hour by hour
    spot_max_share         the share of GPUs that may run on spot in any hour (spot availability)
    on_demand_price_scale  on-demand GPU-hour prices multiplied by this
    spot_price_scale       spot GPU-hour prices multiplied by this
    api_price_scale        hosted-API prices multiplied by this
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetplan.catalogs.loader import InputError, format_validation_error, nearest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PROBABILITY_TOLERANCE = 1e-6  # listed probabilities must sum to 1 within this
MAX_OUTCOMES = 1000  # outcomes a plan may weigh: each is a MIP of the whole horizon
TERMS = ("1y", "3y", "reserved")  # commitment terms; ``reserved``: the catalog's reserved price, term unstated
DEMAND_SCALE_MAX = 100.0


class UncertaintyError(InputError):
    """The ``uncertainty:`` block is invalid; the message is one line for the user."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Overrides(_Strict):
    """What one outcome changes of the base scenario (every field optional)."""

    demand_scale: float | dict[str, float] = 1.0
    spot_max_share: float | None = Field(default=None, ge=0.0, le=1.0)
    on_demand_price_scale: float = Field(default=1.0, gt=0.0, le=10.0)
    spot_price_scale: float = Field(default=1.0, gt=0.0, le=10.0)
    api_price_scale: float = Field(default=1.0, gt=0.0, le=10.0)

    @field_validator("demand_scale")
    @classmethod
    def _scale_in_range(cls, v: float | dict[str, float]) -> float | dict[str, float]:
        for name, s in (v.items() if isinstance(v, dict) else [("", v)]):
            if not (0.0 < s <= DEMAND_SCALE_MAX) or math.isnan(s):
                where = f"{name}: " if name else ""
                raise ValueError(f"{where}{s!r} is outside (0, {DEMAND_SCALE_MAX:g}]")
        return v

    def scale_of(self, product: str) -> float:
        """The demand multiplier of ``product``."""
        if isinstance(self.demand_scale, dict):
            return self.demand_scale.get(product, 1.0)
        return self.demand_scale


class Outcome(Overrides):
    """A listed outcome: a name, a probability and its overrides."""

    name: str = Field(min_length=1, max_length=80)
    probability: float = Field(gt=0.0, le=1.0)


class Distribution(_Strict):
    """A distribution to draw one override from: ``uniform`` (low, high), ``normal`` (mean, std,
    clipped to [low, high] when given), ``lognormal`` (mean and std of the logarithm) or ``choice``
    (values, with weights summing to 1 or equal ones)."""

    distribution: Literal["uniform", "normal", "lognormal", "choice"]
    low: float | None = None
    high: float | None = None
    mean: float | None = None
    std: float | None = Field(default=None, ge=0.0)
    values: list[float] | None = None
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _parameters(self) -> Distribution:
        need = {"uniform": ("low", "high"), "normal": ("mean", "std"), "lognormal": ("mean", "std"),
                "choice": ("values",)}[self.distribution]
        for name in need:
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required for a {self.distribution} distribution")
        if self.distribution == "uniform" and self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"low {self.low:g} is above high {self.high:g}")
        if self.values is not None and not self.values:
            raise ValueError("values: must list at least one value")
        if self.weights is not None:
            if self.values is None or len(self.weights) != len(self.values):
                raise ValueError("weights: one weight per value")
            if any(w < 0 for w in self.weights) or abs(sum(self.weights) - 1.0) > PROBABILITY_TOLERANCE:
                raise ValueError(f"weights: must be at least 0 and sum to 1 (they sum to {sum(self.weights):.6g})")
        return self

    def draw(self, rng: Any) -> float:
        """One value drawn with the generator ``rng``."""
        if self.distribution == "uniform":
            x = float(rng.uniform(self.low, self.high))
        elif self.distribution == "normal":
            x = float(rng.normal(self.mean, self.std))
        elif self.distribution == "lognormal":
            x = float(rng.lognormal(self.mean, self.std))
        else:
            assert self.values is not None
            x = float(self.values[int(rng.choice(len(self.values), p=self.weights))])
        if self.low is not None:
            x = max(x, self.low)
        if self.high is not None:
            x = min(x, self.high)
        return x


SAMPLED_FIELDS = ("demand_scale", "spot_max_share", "on_demand_price_scale", "spot_price_scale", "api_price_scale")


class Sample(_Strict):
    """``scenarios`` outcomes drawn with ``seed``, each of probability 1/scenarios, each field
    drawn from its distribution (fields left out keep the base scenario's value)."""

    scenarios: int = Field(ge=1, le=MAX_OUTCOMES)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    demand_scale: Distribution | None = None
    spot_max_share: Distribution | None = None
    on_demand_price_scale: Distribution | None = None
    spot_price_scale: Distribution | None = None
    api_price_scale: Distribution | None = None


class Uncertainty(_Strict):
    """The ``uncertainty:`` block: the outcomes (listed or sampled), the commitment terms offered,
    an optional risk term and how the plan is solved."""

    outcomes: list[Outcome] | None = Field(default=None, max_length=MAX_OUTCOMES)
    sample: Sample | None = None
    terms: list[Literal["1y", "3y", "reserved"]] = Field(default_factory=lambda: list(TERMS))
    term_gpu_hour_usd: dict[Literal["1y", "3y", "reserved"], dict[str, float]] = Field(default_factory=dict)
    risk_weight: float = Field(default=0.0, ge=0.0, le=100.0)
    cvar_alpha: float = Field(default=0.95, gt=0.0, lt=1.0)
    method: Literal["auto", "extensive", "decomposition"] = "auto"
    max_gap: float = Field(default=0.01, gt=0.0, le=0.5)
    max_iterations: int = Field(default=200, ge=1, le=10000)

    @model_validator(mode="after")
    def _one_source(self) -> Uncertainty:
        if (self.outcomes is None) == (self.sample is None):
            raise ValueError("give either outcomes: (a list) or sample: (distributions), one of them")
        if self.outcomes is not None:
            if not self.outcomes:
                raise ValueError("outcomes: must list at least one outcome")
            names = [o.name for o in self.outcomes]
            for n in names:
                if names.count(n) > 1:
                    raise ValueError(f"outcomes: the name {n!r} is used twice")
            total = sum(o.probability for o in self.outcomes)
            if abs(total - 1.0) > PROBABILITY_TOLERANCE:
                raise ValueError(f"outcomes: probabilities sum to {total:.6g}; they must sum to 1")
        if not self.terms or len(set(self.terms)) != len(self.terms):
            raise ValueError("terms: list each of 1y, 3y, reserved at most once, at least one")
        if self.risk_weight > 0 and self.method == "decomposition":
            raise ValueError("method: decomposition weighs expected cost only; with risk_weight use extensive")
        for term, prices in self.term_gpu_hour_usd.items():
            for gpu, usd in prices.items():
                if not (0.0 < usd < 1000.0):
                    raise ValueError(f"term_gpu_hour_usd.{term}.{gpu}: {usd!r} is outside (0, 1000) USD per GPU-hour")
        return self


@dataclass(frozen=True)
class Case:
    """One outcome the plan weighs: its name, probability and overrides."""

    name: str
    probability: float
    overrides: Overrides = field(default_factory=Overrides)


def parse_uncertainty(raw: Any, where: str, products: list[str]) -> Uncertainty:
    """The block ``raw`` validated, or :class:`UncertaintyError` with one line naming the field;
    product names in ``demand_scale`` are checked against ``products``."""
    if not isinstance(raw, dict):
        raise UncertaintyError(f"{where}: uncertainty: must be a mapping with outcomes: or sample:")
    try:
        unc = Uncertainty.model_validate(raw)
    except ValidationError as err:
        raise UncertaintyError(format_validation_error(err, f"{where}: uncertainty", Uncertainty)) from None
    for o in unc.outcomes or []:
        if isinstance(o.demand_scale, dict):
            for name in o.demand_scale:
                if name not in products:
                    raise UncertaintyError(f"{where}: uncertainty.outcomes[{o.name}].demand_scale: no product "
                                           f"{name!r}{nearest(name, products)}")
    return unc


def cases(unc: Uncertainty) -> list[Case]:
    """The outcomes the block stands for, in order: the listed ones, or ``sample.scenarios`` draws
    (each field drawn in the order of :data:`SAMPLED_FIELDS`, outcome by outcome, from one
    generator seeded with ``sample.seed``: the same outcomes everywhere)."""
    if unc.outcomes is not None:
        return [Case(o.name, o.probability, Overrides.model_validate(o.model_dump(exclude={"name", "probability"})))
                for o in unc.outcomes]
    import numpy as np

    assert unc.sample is not None
    s = unc.sample
    rng = np.random.default_rng(s.seed)
    out = []
    width = len(str(s.scenarios))
    for i in range(s.scenarios):
        values: dict[str, float] = {}
        for name in SAMPLED_FIELDS:
            dist = getattr(s, name)
            if dist is not None:
                values[name] = dist.draw(rng)
        if "demand_scale" in values:
            values["demand_scale"] = min(max(values["demand_scale"], 1e-3), DEMAND_SCALE_MAX)
        for name in ("on_demand_price_scale", "spot_price_scale", "api_price_scale"):
            if name in values:
                values[name] = min(max(values[name], 1e-3), 10.0)
        if "spot_max_share" in values:
            values["spot_max_share"] = min(max(values["spot_max_share"], 0.0), 1.0)
        out.append(Case(f"s{i:0{width}d}", 1.0 / s.scenarios, Overrides.model_validate(values)))
    return out


def mean_case(items: list[Case], products: list[str]) -> Case:
    """The mean forecast: every override at its probability-weighted mean (the spot share left
    as the base scenario's when no outcome sets it)."""
    def avg(get: Any) -> float:
        return sum(c.probability * get(c) for c in items)

    spot = [c for c in items if c.overrides.spot_max_share is not None]
    values: dict[str, Any] = {
        "demand_scale": {p: avg(lambda c, p=p: c.overrides.scale_of(p)) for p in products},
        "on_demand_price_scale": avg(lambda c: c.overrides.on_demand_price_scale),
        "spot_price_scale": avg(lambda c: c.overrides.spot_price_scale),
        "api_price_scale": avg(lambda c: c.overrides.api_price_scale),
    }
    if len(spot) == len(items):
        values["spot_max_share"] = avg(lambda c: c.overrides.spot_max_share)
    return Case("mean forecast", 1.0, Overrides.model_validate(values))
