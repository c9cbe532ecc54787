"""Schema and loading of scenario files (YAML): products to serve and planning options.

Owns what a valid scenario is; it plans nothing and reads no other file but a product's request
histogram (``requests:`` given as a CSV path, read by :mod:`.histogram` relative to the scenario).

Request mixes: ``requests`` is a list of buckets ``{input_tokens, output_tokens, share}``. Shares
must each lie in (0, 1] and sum to 1 within :data:`~fleetplan.optimizer.traffic.histogram.SHARE_TOLERANCE`
(0.01); they are then scaled to sum to exactly 1. A product with ``requests`` may leave out
``input_tokens`` and ``output_tokens``: they become the share-weighted means (rounded).

Percentile targets: ``max_ttft_ms`` is a number (the modelled TTFT of :mod:`fleetplan.models.ttft`)
or a mapping ``{p50: .., p90: .., p99: ..}`` (any non-empty subset), kept as
``ttft_percentiles_ms`` and checked with :mod:`fleetplan.models.queueing`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.files import at_line, short, short_repr, yaml_line  # noqa: I001 - kept apart: the reader's helpers
from fleetplan.catalogs.loader import SECTIONS as CATALOG_SECTIONS
from fleetplan.catalogs.loader import (
    InputError,
    first_error,
    format_validation_error,
    nearest,
    parse_yaml,
    read_text,
)
from fleetplan.catalogs.schema import Precision
from fleetplan.optimizer.common.defaults import (
    BURST_HEADROOM,
    MAX_BATCH,
    RESERVED_DISCOUNT,
    SEED_HEADROOM,
    SPOT_DISCOUNT,
)
from fleetplan.optimizer.common.enums import PrefillMode, Tier
from fleetplan.optimizer.traffic.histogram import MAX_REQUEST_BUCKETS, SHARE_TOLERANCE, read_histogram
from fleetplan.optimizer.traffic.sites import Site, check_sites, site_prices
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from fleetplan.optimizer.traffic.trace import resolve_traces


class ScenarioError(InputError):
    """A scenario file is invalid; the message is one line for the user."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# most products in one scenario: each product's configurations are searched on their own (0.1-0.3 s
# each on the full catalog), and demand, MIP rows and explanations grow with the count; 1,000 is 20
# times the largest stress case (50 products) and already needs minutes of candidate search alone
MAX_PRODUCTS = 1000
# prefill sizing of a product that leaves ``prefill`` out, per preset
PRESET_PREFILL: dict[str, PrefillMode] = {"seed": PrefillMode.HEADROOM, "default": PrefillMode.AUTO}


class APIChoice(_Strict):
    """Hosted-API fallback of a product: which API, and the share of output tokens it may take."""

    model: str = Field(min_length=1, description="an API catalog id, or an LLM id (cheapest provider)")
    max_fraction: Annotated[float, F.FRACTION] = Field(
        default=1.0, description="largest share of output tokens sent to the API")
    min_fraction: Annotated[float, F.FRACTION] = Field(
        default=0.0, description="smallest share of output tokens sent to the API")

    @field_validator("min_fraction")
    @classmethod
    def _min_le_max(cls, v: float, info: Any) -> float:
        hi = info.data.get("max_fraction", 1.0)
        if v > hi:
            raise ValueError(f"min_fraction {v} exceeds max_fraction {hi}")
        return v


class RequestBucket(_Strict):
    """One bucket of a request mix: the sizes of its requests and its share of them."""

    input_tokens: Annotated[int, F.TOKENS] = Field(description="prompt tokens per request of the bucket")
    output_tokens: Annotated[int, F.TOKENS] = Field(description="generated tokens per request of the bucket")
    share: float = Field(gt=0, le=1, description="share of the product's requests in this bucket")


PERCENTILES: dict[str, float] = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


class TTFTPercentiles(_Strict):
    """Percentile targets of time to first token, in milliseconds (any non-empty subset)."""

    p50: Annotated[float | None, F.TTFT_MS] = None
    p90: Annotated[float | None, F.TTFT_MS] = None
    p99: Annotated[float | None, F.TTFT_MS] = None

    @model_validator(mode="after")
    def _some(self) -> TTFTPercentiles:
        if self.p50 is None and self.p90 is None and self.p99 is None:
            raise ValueError("give at least one of p50, p90, p99")
        return self

    def targets_s(self) -> list[tuple[float, float]]:
        """(quantile, budget in seconds) of every target given, lowest quantile first."""
        return [(q, v / 1e3) for name, q in PERCENTILES.items() if (v := getattr(self, name)) is not None]


def _mix_means(v: dict[str, Any]) -> dict[str, Any]:
    """A product with an inline ``requests`` list gets the share-weighted mean sizes it leaves out."""
    buckets = v.get("requests")
    if not isinstance(buckets, list) or not all(isinstance(b, dict) for b in buckets):
        return v
    try:
        weights = [float(b["share"]) for b in buckets]
        total = sum(weights)
        for name in ("input_tokens", "output_tokens"):
            if name not in v and total > 0:
                v[name] = max(1, round(sum(float(b[name]) * w for b, w in zip(buckets, weights)) / total))
    except (KeyError, TypeError, ValueError):
        pass  # the bucket's own validation names the field
    return v


class Product(_Strict):
    """One LLM product: its model, its peak load and its service-level target."""

    name: str = Field(min_length=1)
    model: str = Field(min_length=1)
    precision: Precision | list[Precision] | None = None
    kv_precision: Precision | None = None
    peak_qps: Annotated[float, F.QPS] = Field(
        default=None, description="requests per second at the busiest hour")  # type: ignore[assignment]
    input_tokens: Annotated[int, F.TOKENS] = Field(
        default=None, description="prompt tokens per request")  # type: ignore[assignment]
    output_tokens: Annotated[int, F.TOKENS] = Field(
        default=None, description="generated tokens per request")  # type: ignore[assignment]
    min_tokens_per_s_per_user: Annotated[float, F.TOKENS_PER_S_PER_USER] = Field(
        default=1.0, description="decode speed each user must see")
    headroom: Annotated[float | None, F.FRACTION_BELOW_ONE] = Field(
        default=None, description="share of decode throughput held back")
    prefix_cache_hit_rate: Annotated[float, F.FRACTION] = Field(
        default=0.0, description="share of prompt tokens served from the prefix cache")
    prefill: PrefillMode | None = Field(
        default=None,
        description="how prefill is sized; left out: the preset's rule (auto in default, headroom in seed)")
    prefill_gpus: list[str] | None = None
    max_ttft_ms: Annotated[float | None, F.TTFT_MS] = Field(default=None, description="time-to-first-token target")
    arrival_scv: Annotated[float | None, F.ARRIVAL_SCV] = Field(
        default=None, description="squared coefficient of variation of the inter-arrival times the percentile "
                                  "TTFT targets are planned at; left out: 1 (Poisson; a plan from a trace is "
                                  "replayed on its own arrivals instead)")
    ttft_percentiles_ms: TTFTPercentiles | None = Field(
        default=None, description="percentile TTFT targets (given as max_ttft_ms: {p50: .., p99: ..})")
    requests: list[RequestBucket] | None = Field(
        default=None, description="request-size mix: buckets {input_tokens, output_tokens, share}, or a CSV path")
    demand_profile: str | None = None
    trace: str | None = Field(default=None, description="request log CSV (timestamp, input_tokens, output_tokens) "
                                                        "relative to the scenario file: peak_qps, profile and sizes "
                                                        "when left out")
    trace_buckets: int = Field(default=4, ge=1, le=64, description="log-spaced size buckets of the trace's mix")
    trace_percentile: float = Field(default=0.95, gt=0, le=1,
                                    description="percentile of an hour's per-minute arrival rates planned for")
    api: APIChoice | None = None
    self_host_fixed_monthly_usd: Annotated[float, F.USD_PER_MONTH] = Field(
        default=0.0, description="cost of self-hosting at all (staff, contracts)")

    @model_validator(mode="after")
    def _demand_given(self) -> Product:
        """Without a trace, peak_qps, input_tokens and output_tokens are required; a trace
        replaces the demand profile."""
        if self.trace is not None:
            if self.demand_profile is not None:
                raise ValueError("give demand_profile or trace, not both (a trace gives the hourly profile)")
            return self
        for name in ("peak_qps", "input_tokens", "output_tokens"):
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required (or give trace: a request log CSV)")
        return self

    @model_validator(mode="before")
    @classmethod
    def _targets_and_mix(cls, v: Any) -> Any:
        """``max_ttft_ms`` given as percentiles moves to ``ttft_percentiles_ms``; an inline mix fills
        the mean sizes left out."""
        if not isinstance(v, dict):
            return v
        v = dict(v)
        if isinstance(v.get("max_ttft_ms"), dict):
            v["ttft_percentiles_ms"] = v.pop("max_ttft_ms")
        return _mix_means(v)

    @field_validator("requests")
    @classmethod
    def _shares_sum_to_one(cls, v: list[RequestBucket] | None) -> list[RequestBucket] | None:
        """Shares summing to 1 within the tolerance, scaled to sum to exactly 1."""
        if v is None:
            return v
        if not v:
            raise ValueError("must list at least one bucket (leave it out for one request size)")
        if len(v) > MAX_REQUEST_BUCKETS:
            raise ValueError(f"{len(v):,} buckets; a mix may have at most {MAX_REQUEST_BUCKETS} (each bucket is planned "
                             "on its own): merge neighbouring sizes")
        total = sum(b.share for b in v)
        if abs(total - 1.0) > SHARE_TOLERANCE:
            raise ValueError(f"shares sum to {total:.4g}; they must sum to 1 (within {SHARE_TOLERANCE:g})")
        return [b.model_copy(update={"share": b.share / total}) for b in v]

    @property
    def has_mix(self) -> bool:
        """Whether the product gives a request mix of its own."""
        return self.requests is not None

    @property
    def effective_headroom(self) -> float:
        """Share of decode throughput held back: 30% when it stands in for prefill (the seed's
        rule), 10% burst headroom when prefill is computed (colocated, pool, auto)."""
        if self.headroom is not None:
            return self.headroom
        return SEED_HEADROOM if self.prefill in (PrefillMode.HEADROOM, None) else BURST_HEADROOM

    @property
    def precisions(self) -> tuple[str, ...] | None:
        """Weight precisions this product allows, or None to defer to the options."""
        if self.precision is None:
            return None
        return (self.precision,) if isinstance(self.precision, str) else tuple(self.precision)

    @property
    def peak_output_tokens_per_s(self) -> float:
        """Output tokens per second at peak: QPS x output tokens per request."""
        return self.peak_qps * self.output_tokens


class Options(_Strict):
    """Restrictions of the search space and price overrides; all optional."""

    gpus: list[str] | None = None
    tp: list[Annotated[int, F.TP]] | None = None
    pp: list[Annotated[int, F.TP]] | None = None
    ep: list[Annotated[int, F.TP]] | None = None
    dp_attention: list[Annotated[int, F.TP]] | None = None
    batch: list[Annotated[int, F.BATCH]] | None = None
    max_batch: Annotated[int, F.BATCH] = Field(default=MAX_BATCH, description="largest batch searched")
    precisions: list[Precision] | None = None
    gpu_hour_usd: dict[str, Annotated[float, F.USD_PER_GPU_HOUR]] = Field(default_factory=dict)
    price_provider: str | None = None
    engine: str | None = None
    prefill_gpus: list[str] | None = None
    tiers: list[Tier] = Field(default_factory=lambda: [Tier.ON_DEMAND])
    reserved_gpu_hour_usd: dict[str, Annotated[float, F.USD_PER_GPU_HOUR]] = Field(default_factory=dict)
    spot_gpu_hour_usd: dict[str, Annotated[float, F.USD_PER_GPU_HOUR]] = Field(default_factory=dict)
    reserved_discount: Annotated[float, F.FRACTION_BELOW_ONE] = Field(
        default=RESERVED_DISCOUNT, description="off the on-demand price")
    spot_discount: Annotated[float, F.FRACTION_BELOW_ONE] = Field(default=SPOT_DISCOUNT, description="off the on-demand price")
    spot_max_share: Annotated[float, F.FRACTION] = Field(
        default=0.0, description="largest share of GPUs in any hour on spot")
    time_limit_s: Annotated[float | None, F.TIME_LIMIT_S] = Field(
        default=None, description="wall-clock limit of the whole command; left out: the default")
    mip_rel_gap: Annotated[float, F.MIP_REL_GAP] = 1e-6
    carbon_usd_per_tco2: Annotated[float, F.USD_PER_TCO2] = Field(
        default=0.0, description="carbon price in the objective, USD per tCO2")
    # GPU-hour prices the scenario's sites set, by GPU type: (tier or "carbon", USD, source);
    # filled by Scenario from ``sites`` and the carbon price (see :mod:`.sites`)
    _site_prices: dict[str, tuple[tuple[str, float, str], ...]] = PrivateAttr(default_factory=dict)

    @field_validator("tiers")
    @classmethod
    def _tiers(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("must name at least one of reserved, on_demand, spot")
        if len(set(v)) != len(v):
            raise ValueError("lists a tier twice")
        return v

    @field_validator("gpus", "tp", "pp", "ep", "dp_attention", "batch", "precisions", "prefill_gpus")
    @classmethod
    def _non_empty(cls, v: list[Any] | None) -> list[Any] | None:
        if v is not None and not v:
            raise ValueError("must not be empty (leave it out to search everything)")
        return v


AVAILABILITY_KEYS = ("total", "reserved", "on_demand", "spot")


def _whole(where: str, n: Any, r: F.Range) -> None:
    """A count of GPUs: a whole number in ``r``."""
    r.check(n, where)


class Limits(_Strict):
    """Limits the products share: scarce GPUs, whole instances, one budget."""

    gpu_availability: dict[str, int | dict[str, int]] = Field(
        default_factory=dict,
        description="most GPUs of a type in any hour: a number (all tiers together) or per pricing tier "
                    "({reserved: 32, spot: 16, total: 40})")
    instance_gpus: int | dict[str, int] | None = Field(default=None, description="GPUs per instance (node)")
    monthly_budget_usd: Annotated[float | None, F.USD_PER_MONTH_POSITIVE] = None
    allow_pooling: bool = False

    @field_validator("gpu_availability", mode="before")
    @classmethod
    def _availability_counts(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v  # the type check names it
        for gpu, n in v.items():
            for tier, k in (n.items() if isinstance(n, dict) else [("", n)]):
                where = f"{gpu}.{tier}" if tier else str(gpu)
                if tier and tier not in AVAILABILITY_KEYS:
                    raise ValueError(f"{where}: unknown pricing tier{nearest(str(tier), AVAILABILITY_KEYS)}")
                _whole(where, k, F.GPU_COUNT)
        return v

    @field_validator("instance_gpus", mode="before")
    @classmethod
    def _instance_sizes(cls, v: Any) -> Any:
        for gpu, n in (v.items() if isinstance(v, dict) else [("", v)] if v is not None else []):
            _whole(str(gpu), n, F.INSTANCE_GPUS)
        return v

    def total_availability(self) -> dict[str, int]:
        """Most GPUs of each limited type in any hour, all tiers together."""
        out = {}
        for gpu, n in self.gpu_availability.items():
            if isinstance(n, int):
                out[gpu] = n
            elif "total" in n:
                out[gpu] = n["total"]
        return out

    def tier_availability(self) -> dict[tuple[str, str], int]:
        """Most GPUs of a type in one pricing tier in any hour, per (GPU type, tier)."""
        return {(gpu, t): k for gpu, n in self.gpu_availability.items() if isinstance(n, dict)
                for t, k in n.items() if t != "total"}

    def gpus_per_instance(self, gpu: str) -> int | None:
        """GPUs per instance of ``gpu`` (None: bought GPU by GPU)."""
        if self.instance_gpus is None:
            return None
        if isinstance(self.instance_gpus, int):
            return self.instance_gpus
        return self.instance_gpus.get(gpu, self.instance_gpus.get("default"))


class Scenario(_Strict):
    """A planning scenario: products to serve, a modelling preset, options and shared limits."""

    preset: Literal["seed", "default"] = "default"
    catalogs: list[str] = Field(default_factory=list)
    products: list[Product] = Field(min_length=1)
    options: Options = Field(default_factory=Options)
    limits: Limits = Field(default_factory=Limits)
    sites: list[Site] = Field(default_factory=list, description="sites with a power limit, and owned hardware")

    @model_validator(mode="after")
    def _site_prices(self) -> Scenario:
        """Sites checked (:func:`.sites.check_sites`) and the prices they set handed to the options."""
        if self.sites or self.options.carbon_usd_per_tco2 > 0:
            check_sites(self.sites, list(self.options.tiers))
            self.options._site_prices = site_prices(self.sites, self.options.carbon_usd_per_tco2)
        return self

    @model_validator(mode="after")
    def _preset_prefill(self) -> Scenario:
        """A product that leaves ``prefill`` out gets its preset's rule: computed (``auto``: the
        MIP picks colocated or a pool, whichever is cheaper) in ``default``, the flat ``headroom``
        in ``seed``, whose document sizes prefill that way."""
        mode = PRESET_PREFILL[self.preset]
        if all(p.prefill is not None for p in self.products):
            return self
        products = [p if p.prefill is not None else p.model_copy(update={"prefill": mode}) for p in self.products]
        object.__setattr__(self, "products", products)
        return self

    @field_validator("products", mode="before")
    @classmethod
    def _not_too_many(cls, v: Any) -> Any:
        """At most :data:`MAX_PRODUCTS`, counted before any product is validated."""
        if isinstance(v, list) and len(v) > MAX_PRODUCTS:
            raise ValueError(f"{len(v):,} products; a scenario may have at most {MAX_PRODUCTS:,} (each product's "
                             "configurations are searched on their own): split it into several scenarios")
        return v

    @field_validator("products")
    @classmethod
    def _unique_names(cls, v: list[Product]) -> list[Product]:
        seen: set[str] = set()
        for p in v:
            if p.name in seen:
                raise ValueError(f"product name {short_repr(p.name)} is used twice")
            seen.add(p.name)
        return v


def _inline_histograms(raw: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``raw`` with every product's ``requests:`` CSV path replaced by the buckets read from it."""
    products = raw.get("products")
    if not isinstance(products, list) or not any(isinstance(p, dict) and isinstance(p.get("requests"), str)
                                                 for p in products):
        return raw
    out = []
    for i, p in enumerate(products):
        if isinstance(p, dict) and isinstance(p.get("requests"), str):
            name = short(p.get("name", i))
            p = {**p, "requests": read_histogram(folder / p["requests"], f"products[{name}].requests")}
        out.append(p)
    return {**raw, "products": out}


def parse_scenario(raw: Any, where: str, folder: Path | str | None = None) -> Scenario:
    """Validate a parsed YAML document (or the same as a dict) as a complete scenario; errors
    name ``where`` and the field.

    The one path from a document to a scenario the planner can take: a product's ``requests:``
    CSV path is read and its ``trace:`` resolved (peak, mean lengths and size mix,
    :func:`fleetplan.optimizer.traffic.trace.resolve_traces`), both relative to ``folder`` (the current
    one by default). :func:`load_scenario` and :func:`scenario_from` go through it, so no
    scenario reaches the planner with a trace left unread."""
    base = Path(".") if folder is None else Path(folder)
    return _completed(_validated(raw, where, base), base)


def _completed(scenario: Scenario, folder: Path) -> Scenario:
    """``scenario`` with every product's trace read (relative to ``folder``) into the fields it
    leaves out; unchanged without a trace, and for a scenario already completed."""
    return resolve_traces(scenario, folder)


def _validated(raw: Any, where: str, folder: Path) -> Scenario:
    """``raw`` validated as a :class:`Scenario`, request histograms read relative to ``folder``;
    a validation error becomes one :class:`ScenarioError` line naming the product by name."""
    if isinstance(raw, dict):
        raw = _inline_histograms(raw, folder)
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: a scenario must be a mapping with 'products' (and optional 'preset', 'options')")
    if "uncertainty" in raw:  # read by the two-stage planner, which takes it out first
        raise ScenarioError(f"{where}: uncertainty: plan outcomes with `fleetplan commit` (nearest valid choice: "
                            f"leave uncertainty out to plan one forecast)")
    if raw and "products" not in raw and set(raw) <= set(CATALOG_SECTIONS):
        raise ScenarioError(
            f"{where}: a catalog file (sections {', '.join(map(str, raw))}), not a scenario (no products): give it with "
            f"`catalog` or in a scenario's catalogs: list, and keep it out of a directory of scenarios",
            parameters=("catalog",),
        )
    try:
        return Scenario.model_validate(raw)
    except ValidationError as err:
        msg = format_validation_error(err, where, Scenario)
        loc = first_error(err)["loc"]
        if len(loc) >= 2 and loc[0] == "products" and isinstance(loc[1], int):
            products = raw.get("products") or []
            if loc[1] < len(products) and isinstance(products[loc[1]], dict) and "name" in products[loc[1]]:
                msg = msg.replace(f"products.{loc[1]}", f"products[{short(products[loc[1]]['name'])}]", 1)
        if len(loc) >= 2 and loc[0] == "sites" and isinstance(loc[1], int):
            sites = raw.get("sites") or []
            if loc[1] < len(sites) and isinstance(sites[loc[1]], dict) and "name" in sites[loc[1]]:
                msg = msg.replace(f"sites.{loc[1]}", f"sites[{short(sites[loc[1]]['name'])}]", 1)
        raise ScenarioError(msg) from None


def load_scenario(path: Path | str) -> tuple[Scenario, Path]:
    """Read and validate a scenario file; returns it with its folder (for relative paths)."""
    scenario, _, folder = load_scenario_taking(path, None)
    return scenario, folder


def load_scenario_taking(path: Path | str, block: str | None) -> tuple[Scenario, Any, Path]:
    """:func:`load_scenario` with the top-level ``block`` (such as ``uncertainty``) taken out of
    the document before it is validated and returned as read (None where the file has none), for
    the planner that reads that block; errors name the file's line as :func:`load_scenario`'s do."""
    p = Path(path)
    text = read_text(p, "scenario file", ScenarioError)
    raw = parse_yaml(text, p, ScenarioError)
    taken = None
    if block is not None and isinstance(raw, dict):
        raw = dict(raw)
        taken = raw.pop(block, None)
    try:
        return parse_scenario(raw, str(p), p.parent), taken, p.parent
    except ScenarioError as exc:
        if isinstance(raw, dict):
            raw = _inline_histograms(raw, p.parent)
        raise ScenarioError(at_line(exc.template, str(p), _error_line(raw, text)), parameters=exc.parameters) from None


def scenario_from(source: Scenario | dict[str, Any] | Path | str, folder: Path | str | None = None,
                  where: str = "scenario") -> tuple[Scenario, Path]:
    """A complete scenario and the folder its relative paths are read from, from any of the forms
    a caller holds: a file path (its folder unless ``folder`` is given), a parsed document as a
    dict, or a :class:`Scenario` (both relative to ``folder``, the current one by default).

    A :class:`Scenario` built directly (``Scenario(...)`` or ``Scenario.model_validate``) has had
    no trace read: it is completed here too (a no-op for one already complete)."""
    if isinstance(source, (str, Path)):
        scenario, own = load_scenario(source)
        return scenario, (own if folder is None else Path(folder))
    base = Path(".") if folder is None else Path(folder)
    if isinstance(source, Scenario):
        return _completed(source, base), base
    if not isinstance(source, dict):
        raise ScenarioError(f"{where}: a path, a dict or a Scenario, not {type(source).__name__}")
    return parse_scenario(source, where, base), base


def _error_line(raw: Any, text: str) -> int | None:
    """The line of the scenario ``text`` holding the first field that fails validation."""
    try:
        Scenario.model_validate(raw)
    except ValidationError as err:
        return yaml_line(text, first_error(err)["loc"])
    return None
