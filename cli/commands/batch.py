"""Plan many scenarios in one run: per-scenario plan files, a summary table, failures collected.

Each scenario is solved on its own; one that fails (bad YAML, unknown id, infeasible target,
solver error) becomes an error row and the others still run. Rows come out sorted by scenario
name (the file name without its extension) whatever order the scenarios finish in, so the
summary files are byte-identical from run to run and for any number of worker processes.

Owns the batch's files and summary; every plan is made by the planner, never here.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fleetplan.catalogs.loader import InputError
from fleetplan.rendering.escape import rich_text, terminal
from fleetplan.optimizer.common.enums import Alternatives
from fleetplan.commands.io import (
    EXIT_USER_ERROR, SCENARIO_PRESET_HINT, catalog_inputs, dumps, error_text, resolve_preset, scenario_inputs,
    write_atomically,
)

SUFFIXES = (".yaml", ".yml")
SUMMARY_STEM = "summary"
COLUMNS = (
    "scenario", "product", "status", "error", "monthly_cost_usd", "gpu", "tp", "batch", "precision",
    "replicas", "gpus", "prefill_mode", "prefill_gpus", "api_fraction", "pooled_in",
)


@dataclass(frozen=True)
class BatchSettings:
    """The command-line settings every scenario of a batch is planned with."""

    catalogs: tuple[str, ...] = ()
    solver: str = "highs"
    calibration: str | None = None
    alternatives: Alternatives = Alternatives.DEFAULT


@dataclass(frozen=True)
class Outcome:
    """One scenario's result: the plan as plain data, or the one-line error that stopped it."""

    path: str
    plan: dict[str, Any] | None
    error: str | None

    @property
    def stem(self) -> str:
        """The scenario's name in the summary and in its plan file name."""
        return Path(self.path).stem


def is_batch(paths: list[str]) -> bool:
    """True when the arguments ask for a batch: more than one path, or any directory."""
    return len(paths) > 1 or any(Path(p).is_dir() for p in paths)


NOT_SCENARIO_KEYS = frozenset(("gpus", "models", "prices", "reference", "api_prices", "fleetplan_calibration"))


def not_a_scenario(path: Path) -> str | None:
    """What the YAML file ``path`` is when it is plainly not a scenario, else None.

    A file whose top level is a mapping without ``products`` that has a catalog section
    (``gpus``, ``models``, ``prices``, ``reference``, ``api_prices``) is a catalog, and one with
    ``fleetplan_calibration`` a calibration profile. Anything else, a file that cannot be read
    or parsed included, is taken as a scenario (and fails as one, with its own message).
    """
    from fleetplan.catalogs.files import parse_yaml, read_text

    try:
        doc = parse_yaml(read_text(path, "scenario file"), path)
    except InputError:
        return None
    if not isinstance(doc, dict) or "products" in doc or not NOT_SCENARIO_KEYS.intersection(doc):
        return None
    return "a calibration profile" if "fleetplan_calibration" in doc else "a catalog"


def scenario_files(paths: list[str], skipped: list[str] | None = None) -> list[str]:
    """The scenario files named by ``paths``, sorted by name (the file name without its extension).

    A directory stands for every ``*.yaml`` and ``*.yml`` file directly in it that is a
    scenario: a catalog or calibration profile kept beside the scenarios (see
    :func:`not_a_scenario`) is left out and described in ``skipped``. Any other path is taken
    as a scenario file (a missing one fails as that scenario's error). Raises
    :class:`InputError` for a directory without scenarios or two files with the same stem
    (their plan files would overwrite each other).
    """
    files: list[str] = []
    for p in paths:
        d = Path(p)
        if d.is_dir():
            found = []
            for f in sorted(d.iterdir()):
                if f.suffix not in SUFFIXES or f.is_dir():
                    continue  # a device or pipe named *.yaml is kept: it fails as a scenario, by name
                what = not_a_scenario(f)
                if what is None:
                    found.append(str(f))
                elif skipped is not None:
                    skipped.append(f"{f} is {what}, not a scenario (no 'products')")
            if not found:
                raise InputError(f"plan: no *.yaml or *.yml scenario files in directory {p}")
            files += found
        else:
            files.append(p)
    files.sort(key=lambda f: (Path(f).stem, Path(f).name, f))
    seen: dict[str, str] = {}
    for name in files:
        stem = Path(name).stem
        if stem in seen:
            raise InputError(f"plan: {seen[stem]} and {name} have the same name {stem!r}; their plan files would collide")
        seen[stem] = name
    return files


def one_line(message: str) -> str:
    """``message`` on one line (whitespace runs, newlines included, become one space), capped
    in length like every error line."""
    from fleetplan.catalogs.files import one_line as capped

    return capped(" ".join(message.split()))


def solve_one(path: str, settings: BatchSettings) -> Outcome:
    """Plan the scenario file ``path``; a user, infeasibility or solver error becomes the outcome's error.

    Any other exception is reported as an internal error, unless ``FLEETPLAN_DEBUG`` is set,
    in which case it propagates with its traceback.
    """
    from fleetplan.catalogs import load_catalog
    from fleetplan.optimizer.common.errors import SolverError
    from fleetplan.optimizer.runtime.deadline import DEFAULT_TIME_LIMIT_S, Deadline
    from fleetplan.optimizer.plan import make_plan
    from fleetplan.optimizer.explanation.results import plan_to_dict
    from fleetplan.optimizer.traffic.scenario import load_scenario
    from fleetplan.optimizer.simulation.verify import make_verified_plan

    try:
        scenario, folder = load_scenario(path)
        catalog = load_catalog([*(folder / c for c in scenario.catalogs), *settings.catalogs])
        preset = resolve_preset(scenario.preset, settings.calibration, SCENARIO_PRESET_HINT) if settings.calibration else None
        deadline = Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S)
        plan = make_verified_plan(scenario, catalog, folder, deadline, make_plan, solver=settings.solver,
                                  alternatives=settings.alternatives, preset=preset)
        return Outcome(path, plan_to_dict(plan), None)
    except (InputError, SolverError) as exc:
        return Outcome(path, None, one_line(error_text(exc)))
    except Exception as exc:  # noqa: BLE001 - one scenario's crash must not stop the batch
        if os.environ.get("FLEETPLAN_DEBUG"):
            raise
        return Outcome(path, None, one_line(f"internal error: {type(exc).__name__}: {exc}"))


def solve_all(files: list[str], settings: BatchSettings, jobs: int = 1,
              on_done: Callable[[Outcome], None] | None = None,
              on_start: Callable[[str], None] | None = None, client: Any = None) -> list[Outcome]:
    """Plan every file, ``jobs`` at a time; outcomes in the order of ``files``.

    ``on_done`` is called in the calling process as each scenario finishes (in finishing
    order); ``on_start`` before each file when planning one at a time. With ``jobs > 1`` the
    scenarios are planned in worker processes started afresh (``spawn``), so no state of this
    process leaks into a plan; an interrupt stops them (:mod:`fleetplan.optimizer.runtime.workers`).
    With a Dask ``client`` (:mod:`fleetplan.commands.cluster`) they are planned on its cluster instead.
    """
    done = on_done or (lambda o: None)
    if client is not None:
        from fleetplan.commands.cluster import each_in_order

        on_cluster = []
        for _, o in each_in_order(client, solve_one, [(f, settings) for f in files]):
            done(o)
            on_cluster.append(o)
        return on_cluster
    if jobs <= 1 or len(files) <= 1:
        out = []
        for f in files:
            if on_start:
                on_start(f)
            o = solve_one(f, settings)
            done(o)
            out.append(o)
        return out
    from concurrent.futures import as_completed

    from fleetplan.optimizer.runtime.workers import worker_pool

    results: dict[int, Outcome] = {}
    with worker_pool(min(jobs, len(files))) as pool:
        futures = {pool.submit(solve_one, f, settings): i for i, f in enumerate(files)}
        for fut in as_completed(futures):
            o = fut.result()
            results[futures[fut]] = o
            done(o)
    return [results[i] for i in range(len(files))]


def summary_rows(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """One row per scenario, followed by one row per product of its plan and one per pooled group.

    The scenario row has an empty ``product`` and the plan's ``totals``: ``monthly_cost_usd``,
    decode ``replicas`` and ``gpus`` and ``prefill_gpus``, each replica and GPU counted once; a
    failed scenario has only this row, with status ``error`` and the error message. Product rows
    give the chosen configuration: decode GPU, TP, batch, precision, replicas and GPUs, the
    prefill mode and pool GPUs (null without a pool) and the API's share of output tokens. A
    product of a pooled group names the group in ``pooled_in``, carries its share of the cost
    and 0 replicas and GPUs of its own; the group's row (``product`` is the group's name) carries
    the shared replicas and GPUs and no cost (its cost is in its members' rows). So each numeric
    column of the product rows adds up to the scenario row. Numbers are those of the plan's JSON.
    """
    rows: list[dict[str, Any]] = []
    blank = dict.fromkeys(COLUMNS)
    for o in outcomes:
        if o.plan is None:
            rows.append({**blank, "scenario": o.stem, "product": "", "status": "error", "error": o.error})
            continue
        products = o.plan["products"]
        totals = o.plan.get("totals") or {}
        rows.append({
            **blank, "scenario": o.stem, "product": "", "status": o.plan["status"], "error": "",
            "monthly_cost_usd": o.plan["monthly_cost_usd"],
            "replicas": totals.get("replicas"),
            "gpus": totals.get("gpus", sum(p["gpus"] for p in products)),
            "prefill_gpus": totals.get("prefill_gpus", sum(p["prefill"]["gpus"] or 0 for p in products)),
            "pooled_in": "",
        })
        pools = {pool["name"]: pool for pool in o.plan.get("pools") or []}
        for p in products:
            pool_name = p.get("pooled_in") or ""
            if pool_name in pools:
                pool = pools.pop(pool_name)
                rows.append({
                    **blank, "scenario": o.stem, "product": pool_name, "status": o.plan["status"], "error": "",
                    "gpu": pool["gpu"], "tp": pool["tp"], "batch": pool["batch"], "precision": pool["precision"],
                    "replicas": pool["replicas"], "gpus": pool["gpus"], "prefill_mode": pool.get("prefill_mode"),
                    "prefill_gpus": pool.get("prefill_gpus"), "pooled_in": "",
                })
            rows.append({
                "scenario": o.stem, "product": p["name"], "status": o.plan["status"], "error": "",
                "monthly_cost_usd": p["monthly_cost_usd"], "gpu": p["gpu"], "tp": p["tp"], "batch": p["batch"],
                "precision": p["precision"], "replicas": own_count(p, "replicas"), "gpus": own_count(p, "gpus"),
                "prefill_mode": p["prefill"]["mode"], "prefill_gpus": p["prefill"]["gpus"],
                "api_fraction": p["api_fraction"], "pooled_in": pool_name,
            })
    return rows


def own_count(p: dict[str, Any], key: str) -> int:
    """A product row's replicas or GPUs: its configuration's, or every configuration's of a request mix."""
    return sum(c[key] for c in p["configurations"]) if p.get("configurations") else p[key]


def summary_csv(rows: list[dict[str, Any]]) -> str:
    """The summary as CSV with a header line (``\\n`` line ends; a null is an empty field; a text
    cell a spreadsheet would read as a formula starts with ``'``: :func:`fleetplan.rendering.escape.csv_cell`)."""
    from fleetplan.rendering.escape import csv_cell

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: csv_cell(v) for k, v in r.items()})
    return buf.getvalue()


def print_summary(rows: list[dict[str, Any]], console: Any) -> None:
    """The summary as a rich table: scenario rows in bold; an error column when a scenario failed."""
    from fleetplan.rendering.table_fit import Col, Row, fit_table
    from fleetplan.optimizer.common.text import pct

    def n(x: Any, fmt: str = "{:,}") -> str:
        return "" if x is None else fmt.format(x)

    from fleetplan.rendering.tables import escaped

    rows = escaped(rows)
    errors = any(r["error"] for r in rows)
    cols = [
        Col("scenario", "left", lead=True), Col("product", "left", lead=True), Col("status", "left"), Col("$/month"),
        Col("gpu", "left"), Col("tp"), Col("batch", give_way=2, under="tp"), Col("prec", "left", give_way=3, under="tp"),
        Col("replicas", give_way=4, under="GPUs"), Col("GPUs"), Col("prefill", "left"),
        Col("pool GPUs", give_way=5, under="prefill"), Col("API\nshare", give_way=6, under="$/month", short="API share"),
        *((Col("error", "left", give_way=1),) if errors else ()),  # stderr repeats each error
    ]
    table_rows: list[Row] = []
    for r in rows:
        scen = not r["product"]
        if scen:
            table_rows.append(None)
        cost = n(r["monthly_cost_usd"], "{:,.0f}")
        table_rows.append((
            f"[bold]{r['scenario']}[/bold]" if scen else "",
            f"  {r['product']}" if r.get("pooled_in") else r["product"],
            "[red]error[/red]" if r["status"] == "error" else r["status"],
            f"[bold]{cost}[/bold]" if scen else cost, r["gpu"] or "", n(r["tp"]), n(r["batch"]), r["precision"] or "",
            n(r["replicas"]), n(r["gpus"]), r["prefill_mode"] or "", n(r["prefill_gpus"]),
            "" if r["api_fraction"] is None else pct(r["api_fraction"]), *((r["error"] or "",) if errors else ()),
        ))
    title = f"fleetplan: {sum(1 for r in rows if not r['product'])} scenarios"
    console.print(fit_table(console, title, cols, table_rows))


def _stem_inputs(files: list[str], settings: BatchSettings) -> list[Path]:
    """Every input file of the batch: the scenarios, and the catalogs and demand profiles each
    readable scenario names, the ``--catalog`` files and the calibration profile."""
    from fleetplan.optimizer.traffic.scenario import load_scenario

    inputs: list[Path] = catalog_inputs(settings.catalogs)
    inputs += [Path(settings.calibration)] if settings.calibration else []
    for f in files:
        inputs.append(Path(f))
        try:
            scenario, folder = load_scenario(f)
        except InputError:
            continue  # it fails again, as its own error row, when it is planned
        inputs += scenario_inputs(f, scenario, folder)
    return inputs


def check_outputs(out: str, files: list[str], settings: BatchSettings) -> Path:
    """The batch's output directory, checked with every file the batch would write in it.

    Refused before anything is planned: a directory that is a file or not writable, a scenario
    named like the summary, and a plan or summary file that is one of the batch's inputs, a
    directory or read-only.
    """
    from fleetplan.catalogs.files import check_output_dir
    from fleetplan.commands.io import output_in

    clash = [f for f in files if Path(f).stem == SUMMARY_STEM]
    if clash:
        raise InputError(f"plan: {clash[0]} would overwrite {out}/{SUMMARY_STEM}.json; rename the scenario")
    inputs = _stem_inputs(files, settings)
    out_dir = check_output_dir(out, "--out", inputs)
    if out_dir.is_dir():
        for name in [f"{Path(f).stem}.json" for f in files] + [f"{SUMMARY_STEM}.csv", f"{SUMMARY_STEM}.json"]:
            output_in(out_dir, name, "--out", inputs)
    return out_dir


def run_batch(paths: list[str], settings: BatchSettings, out: str | None, as_json: bool, jobs: int, console: Any,
              scheduler: str | None = None) -> int:
    """Plan every scenario named by ``paths``, write the plan and summary files, print the summary.

    With ``out``, each solved scenario's plan goes to ``out/<stem>.json`` and the summary to
    ``out/summary.csv`` and ``out/summary.json`` (each written atomically); every output path
    is checked before anything is planned. A failed scenario writes no plan file and removes
    none: a ``<stem>.json`` there from before this run is left as it was, and its error line
    says so. Prints the summary table (the summary JSON with ``as_json``), then one line per
    failed scenario on stderr. Returns 2 if any scenario failed, else 0.

    An interrupt (Ctrl-C, SIGTERM) stops the workers, writes the summary of the scenarios that
    finished (with ``out``) and goes on as the same interrupt, with a message saying so.
    With ``scheduler`` the scenarios are planned on that Dask cluster (same files).
    """
    from fleetplan.catalogs.files import make_output_dir
    from fleetplan.commands.interrupts import on_hard_exit

    skipped: list[str] = []
    files = scenario_files(paths, skipped)
    out_dir = check_outputs(out, files, settings) if out else None
    if scheduler is not None:
        from fleetplan.commands.cluster import check_reachable

        check_reachable(scheduler)  # before the output directory is made
    earlier = {f for f in files if out_dir is not None and (out_dir / f"{Path(f).stem}.json").exists()}
    for note in skipped:
        print(terminal(f"fleetplan: note: skipped {note}"), file=sys.stderr)
    if out_dir is not None:
        make_output_dir(out_dir)
    written = _BatchFiles(files, out_dir)
    try:
        with on_hard_exit(written.summary_of_finished if out_dir is not None else lambda: None):
            outcomes = _on_cluster_or_here(files, settings, jobs, written.save, scheduler)
    except KeyboardInterrupt as exc:
        if out_dir is None:
            raise
        done = written.finished()
        written.write_summary(done)
        raise type(exc)(f"{len(done)} of {len(files)} scenarios finished; their plans and the summary of them "
                        f"are in {out}") from None
    text = written.write_summary(outcomes)
    if as_json:
        sys.stdout.write(text)
    else:
        print_summary(summary_rows(outcomes), console)
        if out_dir is not None:
            ok = sum(1 for o in outcomes if o.plan is not None)
            console.print(f"wrote {ok} plan files and {SUMMARY_STEM}.csv, {SUMMARY_STEM}.json to {rich_text(out_dir)}")
    sys.stdout.flush()
    return _report_failures(outcomes, earlier, out)


class _BatchFiles:
    """The files a batch writes in its output directory (none without one): each plan as its
    scenario finishes, and the summary of the outcomes given."""

    def __init__(self, files: list[str], out_dir: Path | None) -> None:
        self.files = files
        self.out_dir = out_dir
        self.done: dict[str, Outcome] = {}

    def save(self, o: Outcome) -> None:
        """Note a finished scenario; write its plan file when it has a plan."""
        self.done[o.path] = o
        if self.out_dir is not None and o.plan is not None:
            write_atomically(self.out_dir / f"{o.stem}.json", dumps(o.plan))

    def finished(self) -> list[Outcome]:
        """The outcomes of the scenarios finished so far, in the batch's order."""
        return [self.done[f] for f in self.files if f in self.done]

    def write_summary(self, outcomes: list[Outcome]) -> str:
        """The summary JSON of ``outcomes``, written with its CSV when there is an output directory."""
        rows = summary_rows(outcomes)
        text = dumps(rows)
        if self.out_dir is not None:
            write_atomically(self.out_dir / f"{SUMMARY_STEM}.csv", summary_csv(rows))
            write_atomically(self.out_dir / f"{SUMMARY_STEM}.json", text)
        return text

    def summary_of_finished(self) -> None:
        """Write the summary of the scenarios finished so far (the last step of a hard exit)."""
        self.write_summary(self.finished())


def _report_failures(outcomes: list[Outcome], earlier: set[str], out: str | None) -> int:
    """One line on stderr per failed scenario (naming its file unless the error does, and a plan
    file from before this run that was kept); exit code 2 when any failed, else 0."""
    failed = [o for o in outcomes if o.plan is None]
    for o in failed:
        error = o.error or ""
        kept = f" ({out}/{o.stem}.json, from before this run, was left as it was)" if o.path in earlier else ""
        print(terminal(f"fleetplan: error: {error if error.startswith(o.path) else f'{o.path}: {error}'}{kept}"),
              file=sys.stderr)
    return EXIT_USER_ERROR if failed else 0


def _on_cluster_or_here(files: list[str], settings: BatchSettings, jobs: int, save: Callable[[Outcome], None],
                        scheduler: str | None) -> list[Outcome]:
    """:func:`_solve_with_progress` on the Dask cluster of ``scheduler``, or here."""
    if scheduler is None:
        return _solve_with_progress(files, settings, jobs, save)
    from fleetplan.commands.cluster import connected

    with connected(scheduler) as client:
        return _solve_with_progress(files, settings, jobs, save, client)


def _solve_with_progress(files: list[str], settings: BatchSettings, jobs: int, save: Callable[[Outcome], None],
                         client: Any = None) -> list[Outcome]:
    """:func:`solve_all`, with a progress bar on stderr when it is a terminal."""
    if not sys.stderr.isatty():
        return solve_all(files, settings, jobs, save, client=client)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("planning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=len(files))

        def advance(o: Outcome) -> None:
            save(o)
            bar.update(task, advance=1, description=f"{rich_text(o.stem)}: {'error' if o.error else 'done'}")

        def start(f: str) -> None:
            bar.update(task, description=f"{rich_text(Path(f).stem)} ...")

        return solve_all(files, settings, jobs, advance, start, client)
