"""A plan file read back (``fleetplan plan --json`` output given to ``simulate``, ``report`` or
``deploy``): checked field by field before any command uses it.

A plan file is the planner's own output, but a user may edit it, keep one from an older version
or be handed one; every value a command reads is validated here as a scenario's are: its type
(strictly: a count is a JSON integer, a string is a string), a finite number within its range
(:mod:`fleetplan.catalogs.fields`, no ``NaN`` or ``Infinity``, which Python's JSON reader
accepts), whole counts where counts are meant, the ids of models and GPUs in the catalog the
command uses (with the nearest valid one), and the cross-references between fields (a pooled
product's pool, a bucket's configurations, one row per plan hour). Replica and GPU counts are
bounded up front (:data:`MAX_PLAN_GPUS`), so no command allocates per replica without limit.
Keys no command reads are let through unchecked. Every problem is one line naming the file and
the field, e.g. ``plan.json: products[chat].replicas: Input should be a valid integer (got
'five')``.

Owns the plan file's schema and its reading; it never plans, simulates or writes. The
commands get the document they read, unchanged, once it is valid.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.fields import Range
from fleetplan.catalogs.files import read_json, short, short_repr
from fleetplan.catalogs.loader import Catalog, InputError, first_error, nearest
from fleetplan.catalogs.schema import Precision
from fleetplan.models.layout import Layout
from fleetplan.models.presets import PRESETS
from fleetplan.optimizer.common.enums import PrefillMode, Tier
from fleetplan.optimizer.traffic.sites import SITE_LIMIT

MAX_PLAN_GPUS = 1_000_000
"""Most GPUs a plan file may run, over all its replica sets at their busiest: a million GPUs is
several times the largest cluster built, and it bounds the replicas ``simulate`` models one by
one and the counts ``deploy`` writes."""

REPLICAS = Range(0, MAX_PLAN_GPUS, "replicas", "a replica has at least one GPU and a plan at most a million",
                 integer=True)
PLAN_GPUS = Range(0, MAX_PLAN_GPUS, "GPUs", "a million GPUs is several times the largest cluster built",
                  integer=True)
HOURS = Range(1, 168, "hours", "a plan covers one hour, a day (24) or a week (168)", integer=True)
HOUR = F.HOUR
TOKENS_PER_S = Range(0, 1e14, "tokens per second",
                     "ten million requests per second of ten million tokens each is beyond any service")
USD = Range(0, 1e12, "USD per month", "a trillion dollars a month is beyond any budget")
USD_DIFFERENCE = Range(-1e12, 1e12, "USD per month", "a trillion dollars a month is beyond any budget")
USD_PER_MILLION = Range(0, 1e12, "USD per million tokens", "a self-hosted product of almost no demand costs a "
                        "lot per token, but not a trillion dollars")
MS = Range(0, 1e7, "milliseconds", "a first token later than about three hours is no latency")
SPEED = Range(0, 1e5, "tokens per second", "faster would need a decode step under 10 microseconds")
RELATIVE_GAP = Range(0, 1e6, "", "a relative optimality gap is a non-negative ratio")
LIMIT_STEP = Range(0, 1e7, "GPUs", "ten million GPUs of one type exceeds the world's installed base", integer=True)
LIMIT_MW = Range(0, 1e6, "MW", "a terawatt site exceeds the world's data centres")

# The shape of a binding limit's name: ``limits.gpu_availability.<gpu>[.<tier>]``; the report
# reads its third (and fourth) part.
LIMIT_NAME = re.compile(r"[^.]+(\.[^.]+){2,3}")

# How a plan file is made, as a message names it: a mark (see :class:`InputError`) the library
# shows as :data:`PLAN_HINT_LIBRARY` and a command as its own plan command.
PLAN_HINT = "`plan_json`"
PLAN_HINT_LIBRARY = {"plan_json": "fleetplan.plan(scenario).to_json()"}


class PlanFileError(InputError):
    """A plan file is not one this version can use; the message is one line for the user."""


# Every number a command reads: a JSON number of the right kind (a count is a JSON integer:
# ``5.0`` and ``"5"`` are refused, as plans are written whole), finite and within its range.
Replicas = Annotated[StrictInt, AfterValidator(REPLICAS.check_int)]
Gpus = Annotated[StrictInt, AfterValidator(PLAN_GPUS.check_int)]
HoursCount = Annotated[StrictInt, AfterValidator(HOURS.check_int)]
HourIndex = Annotated[StrictInt, AfterValidator(HOUR.check_int)]
Degree = Annotated[StrictInt, AfterValidator(F.TP.check_int)]  # tensor, pipeline, attention data-parallel
ExpertDegree = Annotated[StrictInt, AfterValidator(F.EP.check_int)]
Batch = Annotated[StrictInt, AfterValidator(F.BATCH.check_int)]
Tokens = Annotated[StrictInt, AfterValidator(F.WHOLE_TOKENS.check_int)]
ContextTokens = Annotated[StrictInt, AfterValidator(F.CONTEXT_TOKENS.check_int)]
InstanceGpus = Annotated[StrictInt, AfterValidator(F.INSTANCE_GPUS.check_int)]
AvailableGpus = Annotated[StrictInt, AfterValidator(F.GPU_COUNT.check_int)]
LimitGpus = Annotated[StrictInt, AfterValidator(LIMIT_STEP.check_int)]
LimitMw = Annotated[StrictFloat, AfterValidator(LIMIT_MW.check)]
Usd = Annotated[StrictFloat, AfterValidator(USD.check)]
SignedUsd = Annotated[StrictFloat, AfterValidator(USD_DIFFERENCE.check)]
UsdPerMillion = Annotated[StrictFloat, AfterValidator(USD_PER_MILLION.check)]
Fraction = Annotated[StrictFloat, AfterValidator(F.FRACTION.check)]
TokensPerS = Annotated[StrictFloat, AfterValidator(TOKENS_PER_S.check)]
SpeedTarget = Annotated[StrictFloat, AfterValidator(F.TOKENS_PER_S_PER_USER.check)]
Speed = Annotated[StrictFloat, AfterValidator(SPEED.check)]
StepMs = Annotated[StrictFloat, AfterValidator(F.TPOT_MS.check)]
Ms = Annotated[StrictFloat, AfterValidator(MS.check)]
Gap = Annotated[StrictFloat, AfterValidator(RELATIVE_GAP.check)]
Name = Annotated[StrictStr, Field(min_length=1)]
PERCENTILES = ("p50", "p90", "p99")


def _ttft_target(v: Any) -> Any:
    """A TTFT target: milliseconds (a P99 target), or percentile targets ``{p50, p90, p99}``
    (any of them) in milliseconds."""
    if v is None:
        return v
    if isinstance(v, dict):
        unknown = [k for k in v if k not in PERCENTILES]
        if unknown or not v:
            raise ValueError(f"percentile targets are p50, p90, p99 (got {short_repr(v, 60)})")
        for k, x in v.items():
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise ValueError(f"{k}: Input should be a valid number (got {short_repr(x, 40)})")
            F.TTFT_MS.check(x, k)
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be milliseconds or percentile targets {{p50, p90, p99}} (got {short_repr(v, 40)})")
    return F.TTFT_MS.check(v)


class _Read(BaseModel):
    """Base of every part of a plan file: the fields a command reads, checked strictly; any other
    key is kept as it is (a command never reads it). A field without a default is one every plan
    of this version writes (``None`` where it does not apply) and a command reads as it is; one
    with a default is written only where it applies, or read only where present."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)


class _Parallel(_Read):
    """The parallel degrees beyond tensor parallelism of a replica set (written only where they
    apply), and the GPUs one replica of it runs; ``tp`` is each set's own field."""

    tp: Degree | None
    pp: Degree | None = None
    ep: ExpertDegree | None = None
    dp_attention: Degree | None = None

    def replica_gpus(self) -> int:
        """GPUs of one replica (:attr:`fleetplan.models.layout.Layout.gpus`)."""
        return Layout(self.tp or 1, self.pp or 1, self.ep or 1, self.dp_attention or 1).gpus


class KVTransfer(_Read):
    """The KV cache's hand-off from a prefill pool to the decode replicas."""

    transfer_ms_per_request: Ms | None = None


class Prefill(_Parallel):
    """Where a product's prefill runs, and the prefill pool's configuration and replicas."""

    mode: PrefillMode | None
    gpu: Name | None
    precision: Precision | None
    replicas: Replicas | None
    prefix_cache_hit_rate: Fraction | None = None
    kv_transfer: KVTransfer | None = None

    @model_validator(mode="after")
    def _pool_complete(self) -> Prefill:
        if self.gpu is not None:
            missing = [k for k in ("tp", "precision", "replicas") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"a prefill pool on {short(self.gpu, 40)} needs {', '.join(missing)}")
        return self


class Hour(_Read):
    """One hour of a product's plan: demand, decode replicas per tier, pool replicas, API tokens."""

    hour: HourIndex
    demand_tokens_per_s: TokensPerS
    reserved_replicas: Replicas
    on_demand_replicas: Replicas
    spot_replicas: Replicas
    pool_replicas: Replicas | None
    api_tokens_per_s: TokensPerS | None

    @property
    def decode_replicas(self) -> int:
        """Decode replicas of the hour over every tier."""
        return self.reserved_replicas + self.on_demand_replicas + self.spot_replicas


class Configuration(_Parallel):
    """One decode configuration of a request mix, with its replicas and the sizes its step is timed at."""

    key: Name
    gpu: Name
    tp: Degree
    batch: Batch
    precision: Precision
    kv_precision: Precision | None = None
    prefill_mode: PrefillMode
    replicas: Replicas
    peak_hour_replicas: Replicas | None = None
    step_time_ms: StepMs
    step_input_tokens: Tokens | None = None
    step_output_tokens: Tokens | None = None

    @property
    def most_replicas(self) -> int:
        """Replicas at the busiest hour or over the horizon, whichever is more."""
        return max(self.replicas, self.peak_hour_replicas or 0)


class BucketShare(_Read):
    """A bucket's share of its demand served by one configuration."""

    key: Name
    share: Fraction


class Bucket(_Read):
    """One bucket of a request mix: its sizes, share, API share and configurations."""

    input_tokens: Tokens
    output_tokens: Tokens
    share: Fraction
    api_fraction: Fraction | None = None
    configurations: list[BucketShare] | None = None


class Alternative(_Read):
    """A runner-up configuration of a product, as the report lists it."""

    gpu: Name
    tp: Degree | None
    precision: Precision | None
    batch: Batch | None
    replicas: Replicas
    gpus: Gpus
    monthly_cost_usd: Usd
    cost_difference_usd: SignedUsd


class LeftOutRunnerUp(_Read):
    """A GPU type with only a lower bound on its cost, as the report lists it."""

    gpu: Name
    monthly_cost_at_least_usd: Usd
    reason: StrictStr


class Product(_Parallel):
    """One product of a plan: what every command reads of it."""

    name: Name
    model: Name
    gpu: Name | None
    batch: Batch | None
    precision: Precision | None
    kv_precision: Precision | None = None
    context_tokens: ContextTokens
    input_tokens: Tokens
    output_tokens: Tokens
    min_tokens_per_s_per_user: SpeedTarget | None = None
    max_ttft_ms: Annotated[Any, BeforeValidator(_ttft_target)] = None
    replicas: Replicas
    gpus: Gpus
    step_time_ms: StepMs | None = None
    step_input_tokens: Tokens | None = None
    step_output_tokens: Tokens | None = None
    demand_tokens_per_s: TokensPerS
    api_fraction: Fraction
    usable_replica_tokens_per_s: TokensPerS | None
    per_user_tokens_per_s: Speed | None
    ttft_ms: Ms | None
    monthly_cost_usd: Usd
    cost_per_million_tokens_usd: UsdPerMillion | None = None
    why: StrictStr | None = None
    pooled_in: Name | None = None
    prefill: Prefill
    hourly: list[Hour] | None = None
    configurations: list[Configuration] | None = None
    requests: list[Bucket] | None = None
    alternatives: list[Alternative] | None = None
    runner_ups_left_out: list[LeftOutRunnerUp] | None = None

    @model_validator(mode="after")
    def _self_hosted_complete(self) -> Product:
        """A product on GPUs names its configuration; a mix's buckets name its configurations."""
        if self.gpu is not None:
            missing = [k for k in ("tp", "batch", "precision", "step_time_ms") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"runs on {short(self.gpu, 40)} but has no {', '.join(missing)}")
        keys = [c.key for c in self.configurations or []]
        if len(set(keys)) != len(keys):
            raise ValueError("configurations: a key appears twice")
        for i, bucket in enumerate(self.requests or []):
            unknown = [s.key for s in bucket.configurations or [] if s.key not in keys]
            if unknown:
                raise ValueError(f"requests[{i}] names configuration {short_repr(unknown[0], 60)}, which the "
                                 f"product's configurations do not list")
        return self

    def hour_rows(self) -> int:
        """How many hours the product lists (0 without an hourly list)."""
        return len(self.hourly or [])

    def gpus_at_most(self) -> int:
        """The most GPUs the product's own replica sets run in any hour (its decode replicas, its
        mix's configurations and its prefill pool; a pooled group's shared replicas are the group's)."""
        decode = max([self.replicas, *(h.decode_replicas for h in self.hourly or [])]) * self.replica_gpus()
        mix = sum(c.most_replicas * c.replica_gpus() for c in self.configurations or [])
        k = self.prefill
        pool_replicas = max([k.replicas or 0, *((h.pool_replicas or 0) for h in self.hourly or [])])
        pool = pool_replicas * k.replica_gpus()
        return decode + mix + pool


class Pool(_Read):
    """A pooled group: products that share one set of replicas."""

    name: Name
    tp: Degree | None
    replicas: Replicas
    prefill_replicas: Replicas | None
    products: list[Name] | None = None


class GPUUsage(_Read):
    """One GPU type's use at its busiest hour, against what is available."""

    gpus: Gpus
    instances: Gpus | None
    gpus_per_instance: InstanceGpus | None
    stranded_gpus: Gpus
    available: AvailableGpus | None


class Totals(_Read):
    """The plan's totals, as the report prints them."""

    all_gpus: Gpus


class BindingLimit(_Read):
    """A shared limit that binds, and what one more step of it is worth."""

    limit: StrictStr
    step: LimitGpus | LimitMw
    step_unit: StrictStr
    relaxed_to: LimitGpus | LimitMw
    value_usd_per_month: SignedUsd | None
    relaxed_monthly_cost_usd: Usd | None
    proven: StrictBool

    @field_validator("limit")
    @classmethod
    def _limit_name(cls, v: str) -> str:
        if not (LIMIT_NAME.fullmatch(v) or v.startswith(SITE_LIMIT)):
            raise ValueError("must name a limit as limits.gpu_availability.GPU or limits.gpu_availability.GPU.TIER")
        return v


class GapBreakdown(_Read):
    """Where an optimality gap lies, in USD per month."""

    lower_bound: SignedUsd
    products_alone: SignedUsd
    sharing_instances: SignedUsd
    idle_instance_gpus: SignedUsd


class Percentiles(_Read):
    """Replayed percentiles in milliseconds (``None`` where no request was measured)."""

    p50: Ms | None
    p90: Ms | None
    p99: Ms | None


class Verification(_Read):
    """How a plan from a trace held when its trace was replayed (the table and report read it)."""

    method: StrictStr
    hours: list[HourIndex]
    rounds: Annotated[StrictInt, Field(ge=0, le=1_000)]
    meets_targets: StrictBool | None
    ttft_ms: Percentiles | None
    tpot_ms: Percentiles | None
    missed_requests: Annotated[StrictInt, Field(ge=0, le=10**9)] | None


class PlanFile(_Read):
    """A plan as ``fleetplan plan --json`` writes it: every key ``simulate``, ``report`` and
    ``deploy`` read."""

    status: Name
    preset: Name
    calibration: StrictStr | None = None
    hours: HoursCount
    tiers: list[Tier | Literal["owned"]] = Field(min_length=1)  # owned: a site's owned GPUs (see :mod:`fleetplan.optimizer.traffic.sites`)
    monthly_cost_usd: Usd
    mip_gap: Gap | None = None
    gap_breakdown_usd: GapBreakdown | None = None
    monthly_cost_breakdown_usd: dict[StrictStr, Usd]
    totals: Totals
    products: list[Product] = Field(min_length=1)
    pools: list[Pool] | None = None
    gpu_usage: dict[StrictStr, GPUUsage]
    binding_limits: list[BindingLimit] | None = None
    verification: Verification | None = None

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str) -> str:
        if v not in PRESETS:
            raise ValueError(f"unknown preset{nearest(v, PRESETS)}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> PlanFile:
        """Names unique, pooled products in a listed pool, one hourly row per plan hour, and the
        GPUs of every replica set within :data:`MAX_PLAN_GPUS`."""
        names = [p.name for p in self.products]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise ValueError(f"products: the name {short_repr(twice, 40)} appears twice")
        pools = {k.name: k for k in self.pools or []}
        for p in self.products:
            if p.pooled_in is not None and p.pooled_in not in pools:
                raise ValueError(f"products[{short(p.name, 40)}].pooled_in: no pool {short_repr(p.pooled_in, 60)} "
                                 f"in pools{nearest(p.pooled_in, pools) if pools else ''}")
            if p.hourly is not None and p.hour_rows() != self.hours:
                raise ValueError(f"products[{short(p.name, 40)}].hourly: {p.hour_rows()} rows for a plan of "
                                 f"{self.hours} hours")
        gpus = sum(p.gpus_at_most() for p in self.products)
        gpus += sum(k.replicas * (k.tp or 1) for k in pools.values())
        if gpus > MAX_PLAN_GPUS:
            raise ValueError(f"its replica sets run {gpus:,} GPUs; a plan file may run at most {MAX_PLAN_GPUS:,} "
                             f"(a million GPUs is several times the largest cluster built)")
        return self


def _where(loc: tuple[Any, ...], raw: Any) -> str:
    """The field at ``loc`` in the plan document ``raw``: ``products[chat].replicas``, a product
    or pool named by its name, any other list item by its index."""
    out, node = "", raw
    for part in loc:
        if isinstance(part, int):
            item = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            label = item.get("name") if isinstance(item, dict) else None
            out += f"[{short(label, 40)}]" if isinstance(label, str) and label else f"[{part}]"
            node = item
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def _problem(err: ValidationError, raw: Any, where: str) -> str:
    """The first problem pydantic found, on one line naming the file and the field."""
    first = first_error(err)
    field = _where(tuple(first["loc"]), raw)
    more = len(err.errors()) - 1
    tail = f" [and {more} more problem{'s' if more > 1 else ''}]" if more else ""
    if first["type"] == "missing":
        parent, _, name = field.rpartition(".") if field.endswith(str(first["loc"][-1])) else ("", "", field)
        head = f"{where}: {parent} lacks {name}" if parent else f"{where}: lacks {name}"
        return f"{head}: plan the scenario again with this version of fleetplan ({PLAN_HINT}){tail}"
    msg = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    quiet = isinstance(got, (dict, list, BaseModel)) or "(got " in msg
    got_txt = "" if quiet else f" (got {short_repr(got, F.FIELD_ECHO_CHARS)})"
    return f"{where}: {field}: {msg}{got_txt}{tail}" if field else f"{where}: {msg}{got_txt}{tail}"


def _known(ids: dict[str, Any], value: str, field: str, noun: str, where: str) -> None:
    """Raise unless ``value`` is one of the catalog's ``ids``, naming the nearest and the
    parameter that gives the catalog the plan was made with."""
    if value not in ids:
        raise PlanFileError(f"{where}: {field}: unknown {noun} id {short_repr(value, 40)}{nearest(value, ids)}; give "
                            f"the catalog the plan was made with (`catalog`)", parameters=("catalog",))


def check_ids(plan: PlanFile, catalog: Catalog, where: str) -> None:
    """Every model and GPU the plan names is in ``catalog``."""
    for p in plan.products:
        at = f"products[{short(p.name, 40)}]"
        _known(catalog.models, p.model, f"{at}.model", "model", where)
        for field, gpu in ((f"{at}.gpu", p.gpu), (f"{at}.prefill.gpu", p.prefill.gpu)):
            if gpu is not None:
                _known(catalog.gpus, gpu, field, "GPU", where)
        for i, c in enumerate(p.configurations or []):
            _known(catalog.gpus, c.gpu, f"{at}.configurations[{i}].gpu", "GPU", where)
    for gpu in plan.gpu_usage:
        _known(catalog.gpus, gpu, f"gpu_usage.{short(gpu, 40)}", "GPU", where)


def validate_plan(raw: Any, where: str, catalog: Catalog) -> dict[str, Any]:
    """``raw`` (a parsed plan file) once every field a command reads is valid; ``where`` names
    the file in messages."""
    keys = [k for k, f in PlanFile.model_fields.items() if f.is_required()]
    missing = keys if not isinstance(raw, dict) else [k for k in keys if k not in raw]
    if missing:
        raise PlanFileError(f"{where}: not a plan file (missing {', '.join(missing)}); write one with {PLAN_HINT}, "
                            f"or give the scenario", parameters=("plan_json",), library_names=PLAN_HINT_LIBRARY)
    try:
        plan = PlanFile.model_validate(raw)
    except ValidationError as err:
        raise PlanFileError(_problem(err, raw, where), parameters=("plan_json",),
                            library_names=PLAN_HINT_LIBRARY) from None
    check_ids(plan, catalog, where)
    return raw


def read_plan(path: Path | str, catalog: Catalog) -> dict[str, Any]:
    """The plan in the user's file ``path``, validated against ``catalog`` (:func:`validate_plan`)."""
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        raise PlanFileError(f"{path}: a scenario, not a plan; plan it first and give the plan's JSON file")
    return validate_plan(read_json(path, "plan file", PlanFileError), str(path), catalog)
