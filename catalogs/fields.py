"""What a valid number is: one range per kind of quantity, with the reason for each bound.

Every number read from a user (scenario, catalog, demand profile, measurement CSV,
calibration profile, config.json import, command-line flag) is checked against one of the
:class:`Range` objects below, so the same quantity has the same limits everywhere. A valid
number is finite, is never a boolean (YAML's ``true`` is not 1), and lies in its range;
whole-number kinds also refuse fractions. Integers are accepted where a real is expected.

The ranges reject the absurd, not the unusual: each upper bound sits orders of magnitude
above anything deployed today and low enough that the arithmetic downstream (products of
demand, tokens, prices and hours; lists sized by a batch) stays finite and the solver's
coefficients stay representable. The reason is part of each range and of its message.

A range is also pydantic metadata: ``peak_qps: Annotated[float, QPS]`` validates with it
(``int`` fields as whole numbers, ``X | None`` fields letting None through) and puts the
range and its reason in the JSON schema. Plain parsers (CSV cells, command-line flags,
config.json values) call :meth:`Range.check`. This module does no I/O and imports nothing of
the planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, get_args

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from fleetplan.catalogs.files import FIELD_ECHO_CHARS, short_repr



@dataclass(frozen=True)
class Range:
    """The valid values of one kind of quantity: ``lo`` to ``hi``, each end open or closed."""

    lo: float
    hi: float
    unit: str
    reason: str
    lo_open: bool = False
    integer: bool = False
    hi_open: bool = False

    def describe(self) -> str:
        """The range in words, e.g. ``a number from 0 to 1e+07 queries per second``."""
        lo = f"above {_num(self.lo)}" if self.lo_open else f"from {_num(self.lo)}"
        hi = f"to below {_num(self.hi)}" if self.hi_open else f"to {_num(self.hi)}"
        kind = "a whole number" if self.integer else "a number"
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind} {lo} {hi}{unit}"

    def error(self, value: Any) -> str:
        """The message for a refused ``value``: the range, its reason and the value (capped)."""
        return f"must be {self.describe()} ({self.reason}) (got {echo(value)})"

    def check(self, value: Any, where: str = "") -> float:
        """``value`` as a finite number in this range; otherwise ``ValueError`` naming ``where``."""
        head = f"{where}: " if where else ""
        if isinstance(value, bool):
            raise ValueError(f"{head}must be {self.describe()}, not true or false")
        v = _as_number(value)
        if v is None or not self.contains(v):
            raise ValueError(head + self.error(value))
        return v

    def check_int(self, value: Any, where: str = "") -> int:
        """:meth:`check` for a whole-number range, returned as ``int``."""
        return int(self.check(value, where))

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """Validate a field annotated with this range: ``int`` fields must be whole, and a field
        that allows None lets it through."""
        types = get_args(source) or (source,)
        optional = type(None) in types
        valid = replace(self, integer=True) if int in types and float not in types else self

        def validate(value: Any) -> Any:
            if value is None and optional:
                return None
            v = valid.check(value)
            return int(v) if valid.integer else v

        return core_schema.no_info_before_validator_function(validate, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """The field's JSON schema with the range and its reason."""
        out = handler(schema)
        out["x-valid-range"] = f"{self.describe()}: {self.reason}"
        return out

    def contains(self, v: float) -> bool:
        """Whether the finite number ``v`` is valid for this range."""
        if not math.isfinite(v):
            return False
        if self.integer and v != math.floor(v):
            return False
        above = v > self.lo if self.lo_open else v >= self.lo
        below = v < self.hi if self.hi_open else v <= self.hi
        return above and below


def _num(x: float) -> str:
    """A bound for messages: plain below a million, else in e-notation."""
    return f"{x:,.10g}".replace(",", "") if abs(x) < 1e6 else f"{x:g}"


def echo(value: Any) -> str:
    """``repr(value)`` cut to :data:`~fleetplan.catalogs.files.FIELD_ECHO_CHARS` characters, so a
    message stays one short line."""
    return short_repr(value, FIELD_ECHO_CHARS)


def _as_number(value: Any) -> float | None:
    """``value`` as a float when it is a real number or the text of one; booleans are not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 1e300 else math.inf
    if isinstance(value, float):
        return value
    if isinstance(value, str) and len(value) <= 64:
        try:
            return float(value.strip().replace("_", "")) if value.strip() else None
        except ValueError:
            return None
    return None


# ---------------------------------------------------------------- the ranges
FRACTION = Range(0, 1, "", "a share of a whole, from 0 to 1")
FRACTION_BELOW_ONE = Range(0, 1, "", "a share held back or taken off: 1 would leave nothing", hi_open=True)
QPS = Range(0, 1e7, "queries per second",
            "ten million requests per second is far above any single LLM service; 0 is an idle product")
TOKENS = Range(1, 1e7, "tokens", "ten million tokens is above every model's context window")
WHOLE_TOKENS = replace(TOKENS, integer=True)
CONTEXT_TOKENS = Range(1, 1e8, "tokens", "a context window of a hundred million tokens is beyond any model")
TOKENS_PER_S_PER_USER = Range(0, 1e5, "tokens per second", "faster would need a decode step under 10 microseconds",
                              lo_open=True)
ARRIVAL_SCV = Range(0, 1e4, "", "inter-arrival variance over squared mean: 1 is Poisson, real bursty traces "
                    "measure up to a few hundred")
TTFT_MS = Range(0, 1e7, "milliseconds", "a first token later than about three hours is no latency target",
                lo_open=True)
TPOT_MS = Range(1e-3, 1e6, "milliseconds", "a measured step under a microsecond or over 1000 s is a unit error")
MEASURED_TTFT_MS = Range(1e-3, 1e7, "milliseconds",
                         "a measured first token under a microsecond or after about three hours is a unit error")
USD_PER_GPU_HOUR = Range(0, 1e4, "USD per GPU-hour", "a hundred times any list price, all below $100", lo_open=True)
USD_PER_MILLION_TOKENS = Range(0, 1e4, "USD per million tokens", "ten times any listed API price, all below $1000")
USD_PER_MONTH = Range(0, 1e12, "USD per month", "a trillion dollars a month is beyond any budget")
USD_PER_MONTH_POSITIVE = Range(0, 1e12, "USD per month", "a trillion dollars a month is beyond any budget",
                               lo_open=True)
TIME_LIMIT_S = Range(0.01, 1e6, "seconds",
                     "below 10 ms no solver starts; 11 days is no limit: leave the field out for the default")
MIP_REL_GAP = Range(0, 1, "", "a relative optimality gap, from 0 (proven optimal) to 1")
BATCH = Range(1, 65536, "concurrent requests",
              "no engine schedules more than 65,536 sequences per replica; the search enumerates batches up to it",
              integer=True)
TP = Range(1, 1024, "GPUs", "a tensor-parallel group beyond 1,024 GPUs spans no scale-up domain", integer=True)
DRAFT_TOKENS = Range(0, 16, "tokens", "speculative decoders draft at most a few tokens per step", integer=True)
EP = Range(1, 1024, "GPUs", "an expert-parallel group beyond 1,024 GPUs exceeds any deployment", integer=True)
GPU_COUNT = Range(0, 1e7, "GPUs", "ten million GPUs of one type exceeds the world's installed base", integer=True)
INSTANCE_GPUS = Range(1, 1024, "GPUs", "no instance (node) holds more than 1,024 GPUs", integer=True)
SCALEUP_DOMAIN_GPUS = Range(1, 1e5, "GPUs", "a scale-up domain of 100,000 GPUs is beyond any fabric", integer=True)
MEMORY_BYTES = Range(0, 1e15, "bytes", "a petabyte of memory per accelerator is beyond any device", lo_open=True)
BANDWIDTH_BYTES_PER_S = Range(0, 1e17, "bytes per second",
                              "100 PB/s per accelerator is four orders of magnitude above HBM", lo_open=True)
FLOPS_PER_S = Range(0, 1e18, "FLOP/s", "an exaFLOP/s per accelerator is two orders of magnitude above any chip",
                    lo_open=True)
WATTS = Range(0, 1e5, "watts", "100 kW per accelerator is beyond any board", lo_open=True)
PARAMS = Range(0, 1e14, "parameters", "a hundred trillion parameters is two orders above the largest models",
               lo_open=True)
LAYERS = Range(1, 1e5, "layers", "no model has 100,000 layers", integer=True)
WIDTH = Range(1, 1e6, "", "hidden sizes and head dimensions of a million exceed any model", integer=True)
HEADS = Range(1, 1e5, "heads", "no model has 100,000 attention heads", integer=True)
EXPERTS = Range(1, 1e5, "experts", "no model routes among 100,000 experts", integer=True)
SHARED_EXPERTS = Range(0, 1e5, "experts", "no model has 100,000 shared experts", integer=True)
LAYER_COUNT = Range(0, 1e5, "layers", "no model has 100,000 layers", integer=True)
VOCAB = Range(0, 1e8, "tokens", "a vocabulary of a hundred million tokens is beyond any tokenizer", integer=True)
HOUR = Range(0, 167, "", "a plan has at most 168 hours (0 to 167)", integer=True)
SITE_MW = Range(0, 1e5, "MW", "a 100 GW site is a hundred times the largest campus planned", lo_open=True)
PUE = Range(1, 5, "", "facility power over IT power: 1 is the floor, old rooms run near 2-3")
USD_PER_KWH = Range(0, 100, "USD per kWh", "a hundred times any wholesale price peak averaged over an hour")
GCO2_PER_KWH = Range(0, 5000, "gCO2 per kWh", "five times coal's intensity (about 1,000)")
USD_PER_TCO2 = Range(0, 1e4, "USD per tCO2", "a hundred times any traded carbon price")
USD_PER_SERVER = Range(0, 1e9, "USD", "a billion dollars is more than a whole rack-scale cluster", lo_open=True)
USD_PER_KW_MONTH = Range(0, 1e5, "USD per kW-month", "a hundred times any colocation rate")
YEARS = Range(0, 30, "years", "no server is amortised over more than 30 years", lo_open=True)
RATE_PER_YEAR = Range(0, 1, "a year", "an interest rate from 0 to 100% a year")
PROFILE_MULTIPLIER = Range(0, 1e3, "x peak_qps", "an hour a thousand times the stated peak is a unit error")
CALIBRATION_SCALE = Range(0, 1e6, "", "a fitted factor beyond a million is no calibration", lo_open=True)
DEMAND_SCALE = Range(1e-6, 1e6, "x demand", "scales demand by a millionth to a million")
MODEL_PARAMS_FLAG = Range(1, 1e14, "parameters", "a hundred trillion parameters is two orders above the largest models")
JOBS = Range(1, 256, "processes", "more worker processes than 256 only contend for the machine", integer=True)
SWEEP_SAMPLES = Range(1, 1e5, "points", "a hundred thousand plans is a batch queue's work, not one command's", integer=True)
SEED = Range(0, 2**32 - 1, "", "seeds are unsigned 32-bit numbers", integer=True)
