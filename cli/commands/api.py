"""The Python API: plan, simulate and compare fleets from a script or a notebook.

Owns the functions :mod:`fleetplan` exports and their typed, immutable results. Every function
wraps the same library calls as its command (``fleetplan plan``, ``simulate``, ``breakeven``),
so a result's :meth:`Plan.to_json` is byte for byte what the command writes with ``--json``.

It must not act like a command line: it prints nothing, draws no progress line, reads no
environment variable, writes no file and changes no process-wide state (matplotlib's backend,
file descriptors). A bad input raises :class:`InputError` with one line naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from fleetplan.catalogs.fields import ARRIVAL_SCV, SEED, SWEEP_SAMPLES
from fleetplan.catalogs.files import InputError
from fleetplan.catalogs.loader import Catalog
from fleetplan.optimizer.runtime.deadline import ProgressCallback, ProgressEvent
from fleetplan.optimizer.traffic.scenario import Scenario
from fleetplan.optimizer.mip.solvers import SOLVERS

__all__ = [
    "Breakeven", "Estimate", "Plan", "ProgressCallback", "ProgressEvent", "Simulation", "SweepTable", "Validation",
    "breakeven", "estimate", "load_catalog", "load_scenario", "plan", "simulate", "sweep", "validate",
]

# What a scenario may be given as: a YAML file's path, the parsed document, or a Scenario.
ScenarioLike = Union[Scenario, Mapping[str, Any], str, Path]
# What a catalog may be given as: a loaded Catalog, or extra catalog files merged over the shipped one.
CatalogLike = Union[Catalog, str, Path, Sequence[Union[str, Path]], None]

# How the API names the preset a calibration profile was fitted for (no command-line flag to name).
PRESET_HINT = "plan with a scenario that sets 'preset: {fitted}'"


def _dumps(data: Any) -> str:
    """The commands' JSON text (:func:`fleetplan.commands.io.dumps`): one serialiser, so the bytes match."""
    from fleetplan.commands.io import dumps

    return str(dumps(data))


@dataclass(frozen=True)
class _Document:
    """A result held as its JSON text: immutable, and every copy handed out is a fresh one."""

    json_text: str

    def to_dict(self) -> dict[str, Any]:
        """The result as the command's JSON document (a new dict each call: editing it changes nothing here)."""
        out: dict[str, Any] = json.loads(self.json_text)
        return out

    def to_json(self) -> str:
        """The result as the command's ``--json`` output, byte for byte (indented, one trailing newline)."""
        return self.json_text


@dataclass(frozen=True)
class Plan(_Document):
    """The cheapest fleet for a scenario, as ``fleetplan plan --json`` writes it.

    The figures most read are properties; :meth:`to_dict` holds every one (products,
    configurations, hourly fleet, runner-ups, binding limits, verification)."""

    @property
    def status(self) -> str:
        """``optimal``, or how the search ended when it could not prove optimality (e.g. ``time_limit``)."""
        return str(self.to_dict()["status"])

    @property
    def monthly_cost_usd(self) -> float:
        """The fleet's and API's total cost per month, in USD."""
        return float(self.to_dict()["monthly_cost_usd"])

    @property
    def products(self) -> tuple[str, ...]:
        """The names of the planned products, in the scenario's order."""
        return tuple(p["name"] for p in self.to_dict()["products"])

    def _repr_html_(self) -> str:
        """The report's tables (summary, configuration, costs, GPU usage, runner-ups, binding
        limits) as HTML for a notebook; no charts, so nothing is drawn."""
        from fleetplan.rendering import html
        from fleetplan.rendering.escape import Markup, render

        d = self.to_dict()
        sections = [
            ("Summary", html.summary(d)),
            ("Configuration per product", html.configuration(d)),
            ("Cost breakdown", html.breakdown(d, "")),
            ("GPU usage against availability", html._usage_table(d)),
            ("Runner-ups", html.runner_ups(d)),
            ("Binding limits", html.binding(d)),
        ]
        body = "".join(render("<section><h3>{}</h3>{}</section>", h, Markup(s)) for h, s in sections)
        return str(render("<div class=fleetplan>{}</div>", Markup(body)))


@dataclass(frozen=True)
class Simulation(_Document):
    """One hour of requests replayed on a plan's replicas, as ``fleetplan simulate --json`` writes it."""

    @property
    def meets_targets(self) -> bool:
        """Whether every simulated product met its TTFT and TPOT targets."""
        return bool(self.to_dict()["meets_targets"])


@dataclass(frozen=True)
class Breakeven(_Document):
    """All-API, self-host only and the blend as volume scales, as ``fleetplan breakeven --json`` writes it."""


# ---------------------------------------------------------------- inputs
def load_catalog(*files: str | Path) -> Catalog:
    """The shipped catalog with ``files`` (user catalog YAML files) merged over it, validated."""
    from fleetplan.catalogs import load_catalog as load

    return load(files)


def load_scenario(source: ScenarioLike, folder: str | Path | None = None) -> Scenario:
    """A complete, validated scenario from a file path, a dict or a :class:`Scenario`; traces
    and request histograms are read relative to ``folder`` (a file's own folder by default,
    else the current one)."""
    from fleetplan.optimizer.traffic.scenario import scenario_from

    return scenario_from(_plain(source), folder)[0]


def _plain(source: ScenarioLike) -> Scenario | dict[str, Any] | str | Path:
    """``source`` with a read-only mapping turned into the dict the scenario reader takes."""
    if isinstance(source, (Scenario, str, Path)):
        return source
    if isinstance(source, Mapping):
        return dict(source)
    raise InputError(f"scenario: a path, a dict or a fleetplan.Scenario, not {type(source).__name__}")


def _catalog(catalog: CatalogLike, own: Sequence[Path] = ()) -> Catalog:
    """``catalog`` as given, or the shipped catalog with ``own`` (a scenario's catalog files) and
    ``catalog``'s files merged over it, as the commands' ``--catalog`` does."""
    if isinstance(catalog, Catalog):
        return catalog
    files: Iterable[str | Path] = () if catalog is None else [catalog] if isinstance(catalog, (str, Path)) else catalog
    return load_catalog(*own, *files)


def _preset(name: str, calibration: str | Path | None) -> Any:
    """The named preset, adjusted by the calibration profile file when one is given."""
    if calibration is None:
        return None
    from fleetplan.models.calibration import apply_profile
    from fleetplan.models.presets import get_preset

    return apply_profile(get_preset(name), Path(calibration), PRESET_HINT)


def _with_time_limit(scenario: Scenario, folder: Path, time_limit_s: float | None) -> Scenario:
    """``scenario`` with ``options.time_limit_s`` set (validated like the file's own), or as it is."""
    if time_limit_s is None:
        return scenario
    from fleetplan.optimizer.decisions.whatif import apply_edits

    return apply_edits(scenario, {"options.time_limit_s": time_limit_s}, "time_limit_s", folder)


# ---------------------------------------------------------------- plan
def plan(scenario: ScenarioLike, *, catalog: CatalogLike = None, folder: str | Path | None = None,
         solver: str = "highs", time_limit_s: float | None = None, verify: bool = True,
         alternatives: str = "default", calibration: str | Path | None = None, jobs: int = 1,
         progress: ProgressCallback | None = None) -> Plan:
    """The cheapest fleet for ``scenario`` (a YAML path, a dict or a :class:`Scenario`).

    The same plan as ``fleetplan plan`` with the same options: ``catalog`` is a loaded catalog
    or extra catalog files; ``folder`` is where a dict's or a Scenario's relative paths are
    read (a file's own folder by default); ``time_limit_s`` replaces the scenario's
    ``options.time_limit_s``; a plan from a trace is replayed and tightened until it meets its
    targets unless ``verify`` is False; ``alternatives`` is ``none``, ``default`` or ``all``;
    ``calibration`` is a calibration profile file; ``jobs`` worker processes (same plan for any);
    ``progress`` receives a :class:`ProgressEvent` per stage update (nothing is shown without it).
    """
    from fleetplan.optimizer.runtime.deadline import Deadline
    from fleetplan.optimizer.common.defaults import DEFAULT_TIME_LIMIT_S
    from fleetplan.optimizer.common.enums import Alternatives
    from fleetplan.optimizer.plan import make_plan
    from fleetplan.optimizer.explanation.results import plan_to_dict
    from fleetplan.optimizer.traffic.scenario import scenario_from
    from fleetplan.optimizer.simulation.verify import make_verified_plan

    sc, base = scenario_from(_plain(scenario), folder)
    sc = _with_time_limit(sc, base, time_limit_s)
    cat = _catalog(catalog, [base / c for c in sc.catalogs])
    keywords = dict(solver=_choice("solver", solver, SOLVERS),
                    alternatives=Alternatives(_choice("alternatives", alternatives, [a.value for a in Alternatives])),
                    preset=_preset(sc.preset, calibration), jobs=_jobs(jobs))
    deadline = Deadline.after(sc.options.time_limit_s or DEFAULT_TIME_LIMIT_S, progress)
    result = make_verified_plan(sc, cat, base, deadline, make_plan, verify=verify, **keywords)
    return Plan(_dumps(plan_to_dict(result)))


def _choice(field: str, value: str, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``; otherwise one line naming the field and the nearest."""
    from fleetplan.catalogs.loader import nearest

    if value not in choices:
        raise InputError(f"{field}: {value!r} is not one of {', '.join(choices)}{nearest(str(value), list(choices))}")
    return value


def _jobs(jobs: int) -> int:
    """``jobs`` when it is a whole number of worker processes, at least 1."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InputError(f"jobs: {jobs!r} is not a whole number of worker processes of at least 1")
    return jobs


# ---------------------------------------------------------------- simulate
def simulate(plan: Plan | Mapping[str, Any], *, catalog: CatalogLike = None, hour: int | None = None,
             requests: int | None = None, seed: int = 0, trace: str | Path | None = None,
             arrival_scv: float | None = None, trace_rate: str = "logged",
             progress: ProgressCallback | None = None) -> Simulation:
    """One hour of requests (the peak hour unless ``hour``) replayed on ``plan``'s replicas, as
    ``fleetplan simulate`` does: ``plan`` is a :class:`Plan` or a plan's JSON document;
    ``trace`` a request log CSV whose arrivals are replayed instead of drawn ones, as logged or
    (``trace_rate="plan"``) scaled in time to the hour's planned rate; ``progress``
    receives a :class:`ProgressEvent` as simulated time advances (``done``: simulated seconds)."""
    from fleetplan.optimizer.explanation.plan_file import validate_plan
    from fleetplan.catalogs.fields import HOUR
    from fleetplan.optimizer.common.defaults import DEFAULT_REQUESTS
    from fleetplan.optimizer.simulation.simulate_plan import Settings, simulate_plan
    from fleetplan.optimizer.traffic.trace import read_trace
    from fleetplan.commands.simulate import REQUESTS, TRACE_RATES

    doc = plan.to_dict() if isinstance(plan, Plan) else _plan_document(plan)
    cat = _catalog(catalog)
    doc = validate_plan(doc, "plan", cat)
    if trace is not None and arrival_scv is not None:
        raise InputError("arrival_scv: a trace brings its own arrivals; give trace or arrival_scv, not both")
    if trace_rate not in TRACE_RATES:
        raise InputError(f"trace_rate: must be 'logged' or 'plan', not {trace_rate!r}")
    if trace is None and trace_rate != "logged":
        raise InputError("trace_rate: 'plan' scales a trace's arrivals; give trace too")
    hour = None if hour is None else _in_range(HOUR, hour, "hour")
    requests = DEFAULT_REQUESTS if requests is None else _in_range(REQUESTS, requests, "requests")
    if arrival_scv is not None:
        arrival_scv = _number(ARRIVAL_SCV, arrival_scv, "arrival_scv")
    settings = Settings(hour=hour, requests=requests, seed=_in_range(SEED, seed, "seed"),
                        trace=None if trace is None else read_trace(trace), arrival_scv=arrival_scv,
                        trace_rate=trace_rate)
    preset = _preset(doc.get("preset") or "default", doc.get("calibration"))
    if preset is None:
        from fleetplan.models.presets import get_preset

        preset = get_preset(doc.get("preset") or "default")
    return Simulation(_dumps(simulate_plan(doc, cat, preset, settings, _simulated_seconds(progress))))


def _simulated_seconds(progress: ProgressCallback | None) -> Callable[[float], None] | None:
    """The simulation's hook of simulated seconds, reporting them to ``progress`` as events."""
    if progress is None:
        return None
    from fleetplan.optimizer.runtime.deadline import Progress

    reporter = Progress(progress)
    return lambda now_s: reporter.update("simulate: simulated seconds", int(now_s))


def _plan_document(plan: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a plan's JSON document, as strict JSON holds it (a non-finite number is refused)."""
    try:
        doc: dict[str, Any] = json.loads(_dumps(dict(plan)))
    except (TypeError, ValueError) as exc:
        raise InputError(f"plan: not a plan's JSON document ({exc})") from None
    return doc


def _number(r: Any, value: Any, field: str) -> float:
    """``value`` as a number within the range ``r``, else one line naming ``field`` and the range."""
    try:
        return float(r.check(value, field))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _in_range(r: Any, value: Any, field: str) -> int:
    """``value`` as a whole number within the range ``r`` (a :class:`~fleetplan.catalogs.fields.Range`),
    else one line naming ``field`` and the range."""
    try:
        return int(r.check_int(value, field))
    except ValueError as exc:
        raise InputError(str(exc)) from None


# ---------------------------------------------------------------- breakeven
def breakeven(scenario: ScenarioLike, *, catalog: CatalogLike = None, folder: str | Path | None = None,
              scales: Sequence[float] | None = None, solver: str = "highs",
              progress: ProgressCallback | None = None) -> Breakeven:
    """All-API, self-host only and the optimal blend at each multiple ``scales`` of the
    scenario's demand, with the crossover volumes, as ``fleetplan breakeven --json`` gives them.
    Draw the curves with :func:`fleetplan.optimizer.decisions.breakeven.plot_bytes` if wanted; ``progress``
    receives a :class:`ProgressEvent` per stage update of the plans."""
    from fleetplan.optimizer.decisions.breakeven import DEFAULT_SCALES
    from fleetplan.optimizer.runtime.deadline import Deadline
    from fleetplan.optimizer.common.defaults import DEFAULT_TIME_LIMIT_S
    from fleetplan.optimizer.decisions.breakeven import breakeven as compare
    from fleetplan.optimizer.traffic.scenario import scenario_from

    sc, base = scenario_from(_plain(scenario), folder)
    cat = _catalog(catalog, [base / c for c in sc.catalogs])
    result = compare(sc, cat, base, tuple(scales) if scales else DEFAULT_SCALES,
                     solver=_choice("solver", solver, SOLVERS),
                     deadline=Deadline.after(sc.options.time_limit_s or DEFAULT_TIME_LIMIT_S, progress))
    return Breakeven(_dumps(result.as_dict()))


# ---------------------------------------------------------------- sweep
@dataclass(frozen=True)
class SweepTable(_Document):
    """Every point of a sweep planned: ``{"columns": [...], "rows": [...]}``, one row per point
    in point order (the point's values, the plan's key outputs, or the error that stopped it)."""

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows, a fresh list of fresh dicts."""
        rows: list[dict[str, Any]] = self.to_dict()["rows"]
        return rows

    def to_csv(self) -> str:
        """The rows as ``fleetplan sweep`` writes ``sweep.csv``, byte for byte."""
        from fleetplan.commands.sweep import table_csv

        d = self.to_dict()
        return str(table_csv(d["rows"], d["columns"]))


def sweep(scenario: str | Path, axes: Sequence[str], *, samples: int | None = None, seed: int = 0,
          catalog: Sequence[str | Path] = (), calibration: str | Path | None = None, solver: str = "highs",
          jobs: int = 1, progress: ProgressCallback | None = None) -> SweepTable:
    """The scenario file planned at every point of a grid (or ``samples`` random draws, seeded by
    ``seed``) over ``axes``, each written as the command's ``--set`` is: ``PATH=VALUES``, e.g.
    ``products.chat.peak_qps=100:300:100`` or ``options.gpu_hour_usd.h100-sxm=1.5,2.5``.

    The same rows as ``fleetplan sweep``; every point is checked before any is planned, and a
    point that cannot be planned is a row with its error. ``jobs`` worker processes plan them;
    ``progress`` receives a :class:`ProgressEvent` as points are planned (``done`` of ``total``)."""
    from fleetplan.optimizer.decisions.sweep import (
        OUTPUTS, Sweep, check_axes, check_points, grid_points, local_runner, parse_axis, run_points, sampled_points,
    )

    if isinstance(axes, str):
        axes = [axes]
    parsed = [parse_axis(a) for a in axes]
    if not parsed:
        raise InputError("axes: give at least one PATH=VALUES, e.g. products.chat.peak_qps=50:500:50")
    job = Sweep(str(scenario), tuple(str(c) for c in catalog), None if calibration is None else str(calibration),
                _choice("solver", solver, SOLVERS))
    check_axes(job, parsed)
    points = sampled_points(parsed, _in_range(SWEEP_SAMPLES, samples, "samples"), seed) if samples is not None \
        else grid_points(parsed)
    check_points(job, points)
    rows = run_points(job, points, local_runner(_jobs(jobs)), progress)
    columns = ["point", *(a.path for a in parsed), *OUTPUTS, "error"]
    return SweepTable(_dumps({"columns": columns, "rows": rows}))



# ---------------------------------------------------------------- estimate
@dataclass(frozen=True)
class Estimate(_Document):
    """The roofline breakdown of one configuration, as ``fleetplan estimate --json`` writes it."""


def estimate(model: str, gpu: str, *, input_tokens: int, output_tokens: int, tp: int = 1, pp: int = 1, ep: int = 1,
             dp_attention: int = 1, batch: int = 1, precision: str = "bf16", kv_precision: str | None = None,
             engine: str | None = None, preset: str = "default", calibration: str | Path | None = None,
             catalog: Sequence[str | Path] = ()) -> Estimate:
    """Decode step, memory, prefill and TTFT of ``model`` on ``gpu`` at one layout and batch, as
    ``fleetplan estimate`` computes them (``catalog``: extra catalog files)."""
    import argparse

    from fleetplan.catalogs import fields as F
    from fleetplan.catalogs.schema import PRECISIONS
    from fleetplan.commands.estimate import estimate_document
    from fleetplan.models.presets import PRESETS

    args = argparse.Namespace(
        model=model, gpu=gpu, input_tokens=_in_range(F.WHOLE_TOKENS, input_tokens, "input_tokens"),
        output_tokens=_in_range(F.WHOLE_TOKENS, output_tokens, "output_tokens"),
        **{k: _in_range(F.TP, v, k) for k, v in (("tp", tp), ("pp", pp), ("ep", ep), ("dp_attention", dp_attention))},
        batch=_in_range(F.BATCH, batch, "batch"), precision=_choice("precision", precision, PRECISIONS),
        kv_precision=None if kv_precision is None else _choice("kv_precision", kv_precision, PRECISIONS),
        engine=engine, preset=_choice("preset", preset, list(PRESETS)),
        calibration=None if calibration is None else str(calibration), catalog=[str(c) for c in catalog])
    return Estimate(_dumps(estimate_document(args)))


# ---------------------------------------------------------------- validate
@dataclass(frozen=True)
class Validation(_Document):
    """The model against measured benchmarks, as ``fleetplan validate --json`` writes it."""


def validate(measurements: str | Path, *, preset: str = "default", calibration: str | Path | None = None,
             catalog: Sequence[str | Path] = ()) -> Validation:
    """Every row of a measurement CSV predicted with ``preset`` (adjusted by a ``calibration``
    profile file if given): each row's predicted TPOT and TTFT and the error statistics, as
    ``fleetplan validate`` computes them (``catalog``: extra catalog files)."""
    import argparse

    from fleetplan.commands.fidelity import validation_document
    from fleetplan.models.presets import PRESETS

    args = argparse.Namespace(file=str(measurements), preset=_choice("preset", preset, list(PRESETS)),
                              calibration=None if calibration is None else str(calibration),
                              catalog=[str(c) for c in catalog])
    return Validation(_dumps(validation_document(args)))
