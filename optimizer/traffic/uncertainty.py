"""The ``uncertainty:`` block of a scenario: what may come true, each outcome with its probability.

Owns the schema of the block, its validation (one line naming the field and the nearest valid
choice) and the outcomes it stands for: listed ones (``outcomes:``, probabilities summing to 1) or
ones drawn from distributions (``sample:``, a count and a seed: the same draws on every machine).
It plans nothing; :mod:`fleetplan.optimizer.decisions.stochastic` plans against the outcomes.

An outcome overrides the base scenario with:

    demand_scale           every product's QPS (a number) or some products' (a mapping by name)
                           multiplied by this, hour by hour
    demand_profile         some products' hourly profiles replaced: an inline list of 24 or 168
                           multipliers of ``peak_qps``, or a profile CSV relative to the scenario
                           (read as the base scenario reads ``products[].demand_profile``)
    mix_shares             some products' request-mix shares replaced, one per bucket of their
                           ``requests:`` in order (a share of 0 leaves the bucket out)
    long_prompt_shift      the share of long-prompt requests (the buckets whose prompt is longer
                           than the mix's mean prompt) multiplied by this, the other buckets'
                           shares lowered in proportion (every product with a mix, or a mapping)
    spot_max_share         the share of GPUs that may run on spot in any hour (spot availability)
    spot_preemption        the share of spot replica-hours lost to preemption, each lost hour
                           replaced by an on-demand replica-hour (the base scenario loses none)
    on_demand_price_scale  on-demand GPU-hour prices multiplied by this
    spot_price_scale       spot GPU-hour prices multiplied by this
    api_price_scale        hosted-API prices multiplied by this

:func:`outcome_inputs` applies an outcome's demand, mix and spot-availability overrides to the
scenario; the price overrides (and the price of preemption) apply to the outcome's MIP, in
:mod:`fleetplan.optimizer.decisions.stochastic`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.loader import InputError, format_validation_error, nearest
from fleetplan.optimizer.common.defaults import SHARE_TOLERANCE
from fleetplan.optimizer.traffic.demand import VALID_LENGTHS, horizon, profile_qps, read_demand_profile
from fleetplan.optimizer.traffic.scenario import Product, RequestBucket, Scenario
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PROBABILITY_TOLERANCE = 1e-6  # listed probabilities must sum to 1 within this
MAX_OUTCOMES = 1000  # listed outcomes a plan may weigh: each may be a MIP of the whole horizon
# sampled outcomes a plan may weigh: the product split prices each in milliseconds, but every one
# is held as a grid of commitments in memory; beyond this, the tail is better sampled than listed
MAX_SAMPLED_OUTCOMES = 10_000
TERMS = ("1y", "3y", "reserved")  # commitment terms; ``reserved``: the catalog's reserved price, term unstated
DEMAND_SCALE_MAX = 100.0
LONG_PROMPT_SHIFT_MAX = 100.0  # a long-prompt share a hundred times the forecast's is a unit error


class UncertaintyError(InputError):
    """The ``uncertainty:`` block is invalid; the message is one line for the user."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Overrides(_Strict):
    """What one outcome changes of the base scenario (every field optional)."""

    demand_scale: float | dict[str, float] = 1.0
    demand_profile: dict[str, list[float] | str] = Field(default_factory=dict)
    mix_shares: dict[str, list[float]] = Field(default_factory=dict)
    long_prompt_shift: float | dict[str, float] = 1.0
    spot_max_share: float | None = Field(default=None, ge=0.0, le=1.0)
    spot_preemption: float = Field(default=0.0, ge=0.0, le=1.0)
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

    @field_validator("demand_profile", mode="before")
    @classmethod
    def _profiles(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            raise ValueError("a mapping from product name to a profile CSV path or a list of 24 or 168 multipliers")
        for name, given in v.items():
            if isinstance(given, str):
                if not given.strip():
                    raise ValueError(f"{name}: an empty path")
                continue
            if not isinstance(given, list) or len(given) not in VALID_LENGTHS:
                size = f"{len(given)} values" if isinstance(given, list) else F.echo(given)
                raise ValueError(f"{name}: a profile CSV path or a list of 24 (a day) or 168 (a week) multipliers "
                                 f"of peak_qps (got {size})")
            for h, x in enumerate(given):
                F.PROFILE_MULTIPLIER.check(x, f"{name}[{h}]")
        return v

    @field_validator("mix_shares")
    @classmethod
    def _shares(cls, v: dict[str, list[float]]) -> dict[str, list[float]]:
        for name, shares in v.items():
            if not shares or any(not (0.0 <= s <= 1.0) or math.isnan(s) for s in shares):
                raise ValueError(f"{name}: one share from 0 to 1 per bucket of the product's requests, in order")
            total = sum(shares)
            if abs(total - 1.0) > SHARE_TOLERANCE:
                raise ValueError(f"{name}: shares sum to {total:.4g}; they must sum to 1 (within {SHARE_TOLERANCE:g})")
        return v

    @field_validator("long_prompt_shift")
    @classmethod
    def _shift_in_range(cls, v: float | dict[str, float]) -> float | dict[str, float]:
        for name, f in (v.items() if isinstance(v, dict) else [("", v)]):
            if not (0.0 < f <= LONG_PROMPT_SHIFT_MAX) or math.isnan(f):
                where = f"{name}: " if name else ""
                raise ValueError(f"{where}{f!r} is outside (0, {LONG_PROMPT_SHIFT_MAX:g}]")
        return v

    def scale_of(self, product: str) -> float:
        """The demand multiplier of ``product``."""
        if isinstance(self.demand_scale, dict):
            return self.demand_scale.get(product, 1.0)
        return self.demand_scale

    def shift_of(self, product: str) -> float:
        """The long-prompt share multiplier of ``product`` (1: its mix as forecast)."""
        if isinstance(self.long_prompt_shift, dict):
            return self.long_prompt_shift.get(product, 1.0)
        return self.long_prompt_shift


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


SAMPLED_FIELDS = ("demand_scale", "spot_max_share", "on_demand_price_scale", "spot_price_scale", "api_price_scale",
                  "mix_shift", "spot_preemption")


class Sample(_Strict):
    """``scenarios`` outcomes drawn with ``seed``, each of probability 1/scenarios, each field
    drawn from its distribution (fields left out keep the base scenario's value)."""

    scenarios: int = Field(ge=1, le=MAX_SAMPLED_OUTCOMES)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    demand_scale: Distribution | None = None
    spot_max_share: Distribution | None = None
    on_demand_price_scale: Distribution | None = None
    spot_price_scale: Distribution | None = None
    api_price_scale: Distribution | None = None
    mix_shift: Distribution | None = None
    spot_preemption: Distribution | None = None


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


def _names(products: Sequence[str] | Sequence[Product]) -> list[str]:
    return [p if isinstance(p, str) else p.name for p in products]


def parse_uncertainty(raw: Any, where: str, products: Sequence[str] | Sequence[Product],
                      folder: Path | None = None) -> Uncertainty:
    """The block ``raw`` validated, or :class:`UncertaintyError` with one line naming the field.
    Product names in the outcomes' overrides are checked against ``products``; given as the
    scenario's :class:`Product` objects, each outcome is also checked against them (mixes,
    profiles read relative to ``folder``, see :func:`check_outcomes`)."""
    if not isinstance(raw, dict):
        raise UncertaintyError(f"{where}: uncertainty: must be a mapping with outcomes: or sample:")
    try:
        unc = Uncertainty.model_validate(raw)
    except ValidationError as err:
        raise UncertaintyError(format_validation_error(err, f"{where}: uncertainty", Uncertainty)) from None
    names = _names(products)
    for o in unc.outcomes or []:
        for key in ("demand_scale", "demand_profile", "mix_shares", "long_prompt_shift"):
            given = getattr(o, key)
            for name in given if isinstance(given, dict) else ():
                if name not in names:
                    raise UncertaintyError(f"{where}: uncertainty.outcomes[{o.name}].{key}: no product "
                                           f"{name!r}{nearest(name, names)}")
    if products and all(isinstance(p, Product) for p in products):
        check_outcomes(unc, [p for p in products if isinstance(p, Product)], folder or Path("."), where)
    return unc


# ----------------------------------------------------------------------------- request mixes


def long_buckets(product: Product) -> list[int]:
    """Indices of the buckets of ``product``'s mix whose prompt is longer than the mix's
    share-weighted mean prompt (none without a mix)."""
    if product.requests is None:
        return []
    mean = sum(b.share * b.input_tokens for b in product.requests)
    return [i for i, b in enumerate(product.requests) if b.input_tokens > mean * (1.0 + 1e-12)]


def long_share(product: Product) -> float:
    """The share of ``product``'s requests in its long-prompt buckets."""
    assert product.requests is not None
    return sum(product.requests[i].share for i in long_buckets(product))


def outcome_shares(product: Product, ov: Overrides) -> list[float] | None:
    """The shares of ``product``'s buckets in the outcome ``ov`` (None: as forecast). ``mix_shares``
    are taken as given (scaled to sum to exactly 1); ``long_prompt_shift`` f multiplies the
    long-prompt share L to min(f L, 1) and scales every other bucket by (1 - min(f L, 1)) / (1 - L)."""
    if product.requests is None:
        return None
    if product.name in ov.mix_shares:
        given = ov.mix_shares[product.name]
        return [s / sum(given) for s in given]
    f, long = ov.shift_of(product.name), set(long_buckets(product))
    if f == 1.0 or not long:
        return None
    before = long_share(product)
    after = min(f * before, 1.0)
    return [b.share * (after / before if i in long else (1.0 - after) / (1.0 - before))
            for i, b in enumerate(product.requests)]


def _mean_size(buckets: Sequence[RequestBucket], name: str) -> float:
    return sum(b.share * getattr(b, name) for b in buckets) / sum(b.share for b in buckets)


def outcome_product(product: Product, shares: list[float]) -> Product:
    """``product`` with its buckets at ``shares`` (a bucket at 0 left out) and its mean request
    sizes moved with them: the new share-weighted means where the product's were those of its
    mix (as a scenario fills them in), else the product's own scaled by the ratio of the means."""
    assert product.requests is not None
    kept = [b.model_copy(update={"share": s}) for b, s in zip(product.requests, shares) if s > 0.0]
    update: dict[str, Any] = {"requests": kept}
    for name in ("input_tokens", "output_tokens"):
        before, after = _mean_size(product.requests, name), _mean_size(kept, name)
        own = getattr(product, name)
        update[name] = max(1, round(after) if own == max(1, round(before)) else round(own * after / before))
    return product.model_copy(update=update)


# ----------------------------------------------------------------------------- hourly demand


def outcome_profile(product: Product, given: list[float] | str, folder: Path, where: str) -> list[float]:
    """``product``'s queries per second hour by hour under an outcome's profile ``given``: inline
    multipliers of its ``peak_qps``, or a profile CSV relative to ``folder`` read as the base
    scenario's are (``hour,multiplier`` or ``hour,qps``)."""
    if product.trace is not None:
        raise UncertaintyError(f"{where}: products[{product.name}] takes its hourly profile from its trace; scale "
                               f"it instead (nearest valid choice: demand_scale)")
    kind, values = read_demand_profile(folder / given, where) if isinstance(given, str) else ("multiplier", given)
    try:
        return profile_qps(product, kind, list(values))
    except InputError as exc:
        raise UncertaintyError(str(exc).replace(f"products[{product.name}].demand_profile", where, 1)) from None


def outcome_qps(products: Sequence[Product], folder: Path, ov: Overrides, qps: dict[str, list[float]],
                where: str = "uncertainty") -> dict[str, list[float]]:
    """Every product's queries per second in each hour of the outcome ``ov``: its profile (the
    outcome's where it gives one, else the base ``qps``) times its ``demand_scale``, all on one
    horizon (a week when any profile is a week; a daily profile repeats)."""
    own = {p.name: outcome_profile(p, ov.demand_profile[p.name], folder, f"{where}.demand_profile.{p.name}")
           for p in products if p.name in ov.demand_profile}
    hourly = {p.name: own.get(p.name, qps[p.name]) for p in products}
    hours = horizon([len(v) for v in hourly.values() if len(v) > 1])
    return {name: [q * ov.scale_of(name) for q in v] * (hours // len(v)) for name, v in hourly.items()}


def outcome_inputs(scenario: Scenario, folder: Path, ov: Overrides, qps: dict[str, list[float]],
                   where: str = "uncertainty") -> tuple[Scenario, dict[str, list[float]]]:
    """The scenario of the outcome ``ov`` and its products' hourly queries per second: request
    mixes at the outcome's shares, spot availability as it sets, demand as :func:`outcome_qps`.
    ``qps`` is the base scenario's hourly demand (:func:`~.demand.hourly_qps`). Prices and spot
    preemption are the outcome MIP's to apply."""
    update: dict[str, Any] = {}
    shifted = [(p, outcome_shares(p, ov)) for p in scenario.products]
    if any(shares is not None for _, shares in shifted):
        update["products"] = [p if shares is None else outcome_product(p, shares) for p, shares in shifted]
    if ov.spot_max_share is not None:
        update["options"] = scenario.options.model_copy(update={"spot_max_share": ov.spot_max_share})
    sc = scenario.model_copy(update=update) if update else scenario
    return sc, outcome_qps(scenario.products, folder, ov, qps, where)


# ----------------------------------------------------------------------------- checks


def _check_mix(ov: Overrides, products: Sequence[Product], at: str) -> None:
    """An outcome's mix overrides against the scenario's mixes (one line naming the field)."""
    by = {p.name: p for p in products}
    for name, shares in ov.mix_shares.items():
        p = by[name]
        if p.requests is None:
            raise UncertaintyError(f"{at}.mix_shares.{name}: products[{name}] has no request mix (requests:); give "
                                   f"it one in the scenario, or change its demand (nearest valid choice: demand_scale)")
        if len(shares) != len(p.requests):
            raise UncertaintyError(f"{at}.mix_shares.{name}: {len(shares)} shares for {len(p.requests)} buckets; give "
                                   f"one per bucket of products[{name}].requests, in order")
        if isinstance(ov.long_prompt_shift, dict) and name in ov.long_prompt_shift:
            raise UncertaintyError(f"{at}.long_prompt_shift.{name}: give mix_shares or long_prompt_shift for "
                                   f"products[{name}], not both")
    if isinstance(ov.long_prompt_shift, dict):
        named = [by[n] for n in ov.long_prompt_shift]
    else:
        named = [p for p in products if long_buckets(p) and p.name not in ov.mix_shares]
        if ov.long_prompt_shift != 1.0 and not named:
            raise UncertaintyError(f"{at}.long_prompt_shift: no product has a request mix with prompts longer than "
                                   f"its mean (nearest valid choice: mix_shares)")
    field_name = "long_prompt_shift" + (".{}" if isinstance(ov.long_prompt_shift, dict) else "")
    for p in named:
        here = f"{at}.{field_name.format(p.name)}"
        if not long_buckets(p):
            raise UncertaintyError(f"{here}: products[{p.name}] has no request mix with prompts longer than its mean "
                                   f"(nearest valid choice: mix_shares)")
        f, share = ov.shift_of(p.name), long_share(p)
        if f * share > 1.0 + 1e-9:
            most = math.floor(1.0 / share * 1e4) / 1e4
            raise UncertaintyError(f"{here}: {f:g} x {share:.4g} (the long-prompt share of products[{p.name}]) is "
                                   f"above 1 (nearest valid choice: {most:g})")


def check_outcomes(unc: Uncertainty, products: Sequence[Product], folder: Path, where: str) -> None:
    """Every listed outcome checked against the scenario's products (their mixes, the profiles
    it reads relative to ``folder``), and a sampled ``mix_shift`` against the mixes; the first
    problem is :class:`UncertaintyError`, one line naming the field."""
    for o in unc.outcomes or []:
        at = f"{where}: uncertainty.outcomes[{o.name}]"
        _check_mix(o, products, at)
        for name, given in o.demand_profile.items():
            p = next(q for q in products if q.name == name)
            outcome_profile(p, given, folder, f"{at}.demand_profile.{name}")
    if unc.sample is not None and unc.sample.mix_shift is not None and not any(long_buckets(p) for p in products):
        raise UncertaintyError(f"{where}: uncertainty.sample.mix_shift: no product has a request mix with prompts "
                               f"longer than its mean (nearest valid choice: demand_scale)")


def cases(unc: Uncertainty) -> list[Case]:
    """The outcomes the block stands for, in order: the listed ones, or ``sample.scenarios`` draws
    (each field drawn in the order of :data:`SAMPLED_FIELDS`, outcome by outcome, from one
    generator seeded with ``sample.seed``: the same outcomes everywhere). A ``mix_shift`` draw is
    the outcome's ``long_prompt_shift`` (a product whose long-prompt share it would take above 1
    gets every request long)."""
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
        out.append(Case(f"s{i:0{width}d}", 1.0 / s.scenarios, Overrides.model_validate(_clipped(values))))
    return out


def _clipped(values: dict[str, float]) -> dict[str, float]:
    """Sampled overrides kept within their fields' ranges (``mix_shift`` as ``long_prompt_shift``)."""
    if "demand_scale" in values:
        values["demand_scale"] = min(max(values["demand_scale"], 1e-3), DEMAND_SCALE_MAX)
    for name in ("on_demand_price_scale", "spot_price_scale", "api_price_scale"):
        if name in values:
            values[name] = min(max(values[name], 1e-3), 10.0)
    for name in ("spot_max_share", "spot_preemption"):
        if name in values:
            values[name] = min(max(values[name], 0.0), 1.0)
    if "mix_shift" in values:
        values["long_prompt_shift"] = min(max(values.pop("mix_shift"), 1e-3), LONG_PROMPT_SHIFT_MAX)
    return values


def mean_case(items: list[Case], products: list[str], scenario: Scenario | None = None, folder: Path | None = None,
              qps: dict[str, list[float]] | None = None) -> Case:
    """The mean forecast: every override at its probability-weighted mean (the spot share left
    as the base scenario's when no outcome sets it). Given the base ``scenario`` (with its
    ``folder`` and hourly ``qps``), a mix some outcome shifts is at its buckets' mean shares and
    a product some outcome gives a profile runs at its mean hourly demand."""
    def avg(get: Any) -> float:
        return sum(c.probability * get(c) for c in items)

    spot = [c for c in items if c.overrides.spot_max_share is not None]
    values: dict[str, Any] = {
        "demand_scale": {p: avg(lambda c, p=p: c.overrides.scale_of(p)) for p in products},
        "on_demand_price_scale": avg(lambda c: c.overrides.on_demand_price_scale),
        "spot_price_scale": avg(lambda c: c.overrides.spot_price_scale),
        "api_price_scale": avg(lambda c: c.overrides.api_price_scale),
        "spot_preemption": avg(lambda c: c.overrides.spot_preemption),
    }
    if len(spot) == len(items):
        values["spot_max_share"] = avg(lambda c: c.overrides.spot_max_share)
    mean = Overrides.model_validate(values)
    if scenario is not None:
        mean = mean.model_copy(update=_mean_mix_and_profiles(items, scenario, folder or Path("."), qps or {}, mean))
    return Case("mean forecast", 1.0, mean)


def _mean_mix_and_profiles(items: list[Case], scenario: Scenario, folder: Path, qps: dict[str, list[float]],
                           mean: Overrides) -> dict[str, Any]:
    """The mean forecast's ``mix_shares`` (each bucket's probability-weighted share) and
    ``demand_profile`` (each hour's probability-weighted demand, as multipliers of ``peak_qps``,
    its ``demand_scale`` then 1) where some outcome changes them; nothing where none does."""
    update: dict[str, Any] = {}
    mixes: dict[str, list[float]] = {}
    for p in scenario.products:
        shares = [outcome_shares(p, c.overrides) for c in items]
        if p.requests is not None and any(s is not None for s in shares):
            base = [b.share for b in p.requests]
            mixes[p.name] = [sum(c.probability * (s or base)[i] for c, s in zip(items, shares)) for i in range(len(base))]
    if mixes:
        update["mix_shares"] = mixes
    profiled = sorted({name for c in items for name in c.overrides.demand_profile})
    if profiled:
        per = [outcome_qps(scenario.products, folder, c.overrides, qps) for c in items]
        hours = horizon([len(d[name]) for d in per for name in profiled if len(d[name]) > 1])
        peaks = {p.name: p.peak_qps for p in scenario.products}
        update["demand_profile"] = {name: [sum(c.probability * (d[name] * (hours // len(d[name])))[h]
                                               for c, d in zip(items, per)) / peaks[name] for h in range(hours)]
                                    for name in profiled}
        scale = dict(mean.demand_scale) if isinstance(mean.demand_scale, dict) else {}
        update["demand_scale"] = {**scale, **{name: 1.0 for name in profiled}}
    return update
