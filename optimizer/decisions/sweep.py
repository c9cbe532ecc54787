"""What-if sweeps: grids and Monte-Carlo draws of scenario fields, each point planned on its own,
locally in worker processes or on a Dask cluster, with the same rows either way.

``--set PATH=VALUES`` gives a field (:mod:`.whatif` paths) its values: a grid ``50:500:50``
(start, stop and step, both ends included), a list ``1.5,2,2.5`` (numbers or words), or, with
``--samples N``, a distribution: ``uniform(lo,hi)``, ``normal(mean,sd)``, ``lognormal(mu,sigma)``
(of the log) or ``choice(a,b,...)``. A grid's points are every combination, in the order the
flags are given (the last varies fastest); draws come from one seeded generator, so the points
are the same on every machine. Each point is planned without runner-ups or baselines, within
its own deadline (the scenario's ``time_limit_s``); a point that fails keeps its row, with the
error.

Owns the points, planning one point and running them; it writes no file (the CLI does)."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

from fleetplan.optimizer.common.defaults import DEFAULT_MAX_POINTS, MAX_POINTS
from fleetplan.catalogs.files import short
from fleetplan.catalogs.loader import InputError, nearest
from fleetplan.optimizer.runtime.deadline import Progress, ProgressCallback
from fleetplan.catalogs import load_catalog
from fleetplan.models.calibration import apply_profile
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.traffic.scenario import load_scenario
from fleetplan.optimizer.decisions.whatif import apply_edits, check_path
from fleetplan.optimizer.common.errors import SolverError
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.runtime.workers import worker_pool

# A grid's value count is printed in full below this; above it, only its order of magnitude.
_COUNT_DIGITS = 1e15
# Numbers are rounded to this many significant digits when a grid is stepped, so 0.1 + 0.2
# lands on 0.3 and every machine gets the same points.
GRID_DIGITS = 12
DISTRIBUTIONS = ("uniform", "normal", "lognormal", "choice")
_DIST = re.compile(r"^(\w+)\((.*)\)$")


@dataclass(frozen=True)
class Axis:
    """One ``--set``: a field path and its grid values, or its distribution (name, arguments)."""

    path: str
    values: tuple[Any, ...] = ()
    distribution: str | None = None
    arguments: tuple[Any, ...] = ()


def _number(text: str) -> Any:
    """``text`` as an int, a float, or the word itself."""
    t = text.strip()
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return t


# The parameters a sweep's messages name (```axes```, see :class:`InputError`): the command shows its flags.
PARAMETERS = ("axes", "samples", "max_points")


def _error(message: str) -> InputError:
    """A sweep's input error, its parameters marked."""
    return InputError(message, parameters=PARAMETERS)


def too_many(what: str, count: float, max_points: int) -> InputError:
    """The error for ``count`` points (or values) beyond ``max_points``: the count, the limit and
    how to raise it."""
    shown = f"{count:,.0f}" if count < _COUNT_DIGITS else f"more than {_COUNT_DIGITS:.0e}"
    raise_it = (f"give `max_points` {math.ceil(count)} to run them" if count <= MAX_POINTS
                else f"`max_points` allows at most {MAX_POINTS:,}")
    return _error(f"{what}: {shown} points; a sweep runs at most {max_points:,} ({raise_it}, or take fewer values)")


def _grid(flag: str, text: str, max_points: int = DEFAULT_MAX_POINTS) -> tuple[float, ...]:
    """``start:stop:step`` as its values, both ends included; more than ``max_points`` values
    are refused before any is made (the count is computed in floating point, so a range such
    as ``0:1e308:1e-308`` is refused rather than overflowing)."""
    try:
        start, stop, step = (float(x) for x in text.split(":"))
    except ValueError:
        raise _error(f"{flag}: a grid is start:stop:step with three numbers (got {short(text)!r})") from None
    if step <= 0 or stop < start or not all(map(math.isfinite, (start, stop, step))):
        raise _error(f"{flag}: a grid needs a step above 0 and stop >= start (got {short(text)!r})")
    count = (stop - start) / step + 1
    if not count <= max_points + 1:  # also catches an infinite count (a span over the largest float)
        raise too_many(flag, count, max_points)
    n = math.floor((stop - start) / step + 1e-9) + 1
    if n > max_points:
        raise too_many(flag, n, max_points)
    whole = all(float(x).is_integer() for x in (start, step))
    return tuple(int(start + i * step) if whole else float(f"{start + i * step:.{GRID_DIGITS}g}") for i in range(n))


def parse_axis(text: str, max_points: int = DEFAULT_MAX_POINTS) -> Axis:
    """One ``--set PATH=VALUES`` (see the module docstring); bad syntax, or a grid of more than
    ``max_points`` values, raises naming the flag."""
    path, sep, values = text.partition("=")
    flag = f"`axes` {text}"
    if not sep or not path or not values:
        raise _error(f"`axes` {text}: give PATH=VALUES, e.g. products.chat.peak_qps=50:500:50")
    m = _DIST.match(values.strip())
    if m:
        name = m.group(1)
        if name not in DISTRIBUTIONS:
            raise _error(f"{flag}: unknown distribution {name!r}{nearest(name, DISTRIBUTIONS)}")
        args = tuple(_number(a) for a in m.group(2).split(","))
        _check_distribution(flag, name, args)
        return Axis(path.strip(), distribution=name, arguments=args)
    if ":" in values:
        return Axis(path.strip(), _grid(flag, values, max_points))
    return Axis(path.strip(), tuple(_number(v) for v in values.split(",")))


def _check_distribution(flag: str, name: str, args: tuple[Any, ...]) -> None:
    """A distribution's arguments: two numbers (the second above 0, above the first for uniform)."""
    if name == "choice":
        if not args or args == ("",):
            raise _error(f"{flag}: choice(...) needs at least one value")
        return
    if len(args) != 2 or not all(isinstance(a, (int, float)) for a in args):
        raise _error(f"{flag}: {name}(a,b) takes two numbers (got {len(args)} arguments)")
    lo, hi = args
    if (name == "uniform" and hi <= lo) or (name != "uniform" and hi <= 0):
        why = "hi must exceed lo" if name == "uniform" else "the spread must be above 0"
        raise _error(f"{flag}: {name}({lo},{hi}): {why}")


def grid_points(axes: list[Axis], max_points: int = DEFAULT_MAX_POINTS) -> list[dict[str, Any]]:
    """Every combination of the axes' values (the last axis varies fastest); more than
    ``max_points`` combinations are refused before any is made."""
    bad = [a.path for a in axes if a.distribution]
    if bad:
        raise _error(f"`axes` {bad[0]}: a distribution needs `samples` N (or give values: a,b or start:stop:step)")
    n = math.prod(len(a.values) for a in axes)
    if n > max_points:
        raise too_many("`axes`", n, max_points)
    return [dict(zip((a.path for a in axes), combo)) for combo in itertools.product(*(a.values for a in axes))]


def _draw(rng: Any, a: Axis) -> Any:
    """One value of axis ``a``: a distribution's draw (6 significant digits), or one of its values."""
    if a.distribution is None:
        return a.values[int(rng.integers(len(a.values)))]
    if a.distribution == "choice":
        return a.arguments[int(rng.integers(len(a.arguments)))]
    p, q = a.arguments
    x = {"uniform": lambda: rng.uniform(p, q), "normal": lambda: rng.normal(p, q),
         "lognormal": lambda: rng.lognormal(p, q)}[a.distribution]()
    return float(f"{x:.6g}")


def sampled_points(axes: list[Axis], samples: int, seed: int,
                   max_points: int = DEFAULT_MAX_POINTS) -> list[dict[str, Any]]:
    """``samples`` Monte-Carlo points: every axis drawn independently from one generator seeded
    with ``seed`` (a list of values is drawn from uniformly); more than ``max_points`` samples
    are refused before any is drawn."""
    import numpy as np

    if samples > max_points:
        raise too_many("`samples`", samples, max_points)

    rng = np.random.default_rng(seed)
    return [{a.path: _draw(rng, a) for a in axes} for _ in range(samples)]


@dataclass(frozen=True)
class Sweep:
    """What every point shares: the scenario file, extra catalogs, calibration and solver, and
    how the caller names the parameters a point's error names (``(parameter, shown as)`` pairs)."""

    scenario: str
    catalogs: tuple[str, ...] = ()
    calibration: str | None = None
    solver: str = "highs"
    names: tuple[tuple[str, str], ...] = ()


@lru_cache(maxsize=4)
def _loaded(sweep: Sweep) -> tuple[Any, Path, Any, Any]:
    """The scenario, its folder, the catalog and the preset, read once per process."""
    scenario, folder = load_scenario(sweep.scenario)
    catalog = load_catalog([*(folder / c for c in scenario.catalogs), *sweep.catalogs])
    preset = apply_profile(get_preset(scenario.preset), Path(sweep.calibration), "") if sweep.calibration else None
    return scenario, folder, catalog, preset


def check_axes(sweep: Sweep, axes: list[Axis]) -> None:
    """Every axis's path names a field of the scenario (raises naming the nearest valid one)."""
    scenario, folder = _loaded(sweep)[:2]
    seen: set[str] = set()
    for a in axes:
        check_path(scenario, a.path)
        if a.path in seen:
            raise _error(f"`axes` {a.path}: given twice; give all its values in one `axes` (a,b,c)")
        seen.add(a.path)


def check_points(sweep: Sweep, points: list[dict[str, Any]]) -> None:
    """Every point makes a valid scenario (a value out of its field's range raises naming the
    field and the range), before any point is planned."""
    scenario, folder = _loaded(sweep)[:2]
    seen: set[tuple[Any, ...]] = set()
    for p in points:
        key = tuple(sorted(p.items()))
        if key not in seen:  # draws and grids repeat values; each distinct point is checked once
            seen.add(key)
            apply_edits(scenario, p, folder=folder)


def plan_point(task: tuple[Sweep, int, dict[str, Any]]) -> dict[str, Any]:
    """One point: the scenario with the point's values, planned (runner-ups and baselines off);
    its row holds the point, the inputs, the plan's key outputs, or the error that stopped it."""
    sweep, index, values = task
    scenario, folder, catalog, preset = _loaded(sweep)
    row: dict[str, Any] = {"point": index, **values}
    try:
        plan = make_plan(apply_edits(scenario, values, folder=folder), catalog, sweep.solver, False, preset, folder,  # type: ignore[arg-type]
                         compare_first_come=False)
    except (InputError, SolverError) as exc:
        status = "infeasible" if "infeasible" in str(exc) else "error"
        text = exc.render(dict(sweep.names)) if isinstance(exc, InputError) else str(exc)
        return {**row, **dict.fromkeys(OUTPUTS), "status": status, "error": text}
    return {**row, **outputs(plan_to_dict(plan)), "error": None}


# The plan's outputs each row carries, in column order.
OUTPUTS = ("status", "monthly_cost_usd", "gpus", "replicas", "gpu_types", "main_gpu", "mip_gap")


def outputs(d: dict[str, Any]) -> dict[str, Any]:
    """A plan's key outputs: status, cost, GPUs and replicas (each counted once), the GPU types it
    uses (``gpu:count`` by count, then name) and the one with most GPUs, and the proven gap."""
    usage = sorted(((u["gpus"], g) for g, u in (d.get("gpu_usage") or {}).items()), key=lambda x: (-x[0], x[1]))
    return {"status": d["status"], "monthly_cost_usd": d["monthly_cost_usd"], "gpus": d["totals"]["all_gpus"],
            "replicas": d["totals"]["replicas"] + d["totals"]["prefill_replicas"],
            "gpu_types": ";".join(f"{g}:{n}" for n, g in usage), "main_gpu": usage[0][1] if usage else "api",
            "mip_gap": d["mip_gap"]}


Runner = Callable[[Callable[[Any], dict[str, Any]], list[Any]], Iterable[dict[str, Any]]]


def run_points(sweep: Sweep, points: list[dict[str, Any]], runner: Runner,
               progress: ProgressCallback | None = None) -> list[dict[str, Any]]:
    """Plan every point with ``runner`` (local workers or a Dask client); rows in point order.
    ``progress`` hears of each row as the runner hands it over (``done`` of ``total`` points)."""
    tasks = [(sweep, i, p) for i, p in enumerate(points)]
    reporter = Progress(progress)
    rows = []
    for row in runner(plan_point, tasks):
        rows.append(row)
        reporter.update("sweep: points planned", len(rows), len(tasks))
    return sorted(rows, key=lambda r: r["point"])


def local_runner(jobs: int) -> Runner:
    """Points planned in ``jobs`` spawned worker processes (:mod:`fleetplan.optimizer.runtime.workers`), or in this process for one."""
    def run(fn: Callable[[Any], dict[str, Any]], tasks: list[Any]) -> Iterable[dict[str, Any]]:
        if jobs <= 1:
            return (fn(t) for t in tasks)
        with worker_pool(jobs) as pool:
            return list(pool.map(fn, tasks, chunksize=max(1, len(tasks) // (4 * jobs))))
    return run
