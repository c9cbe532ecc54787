"""The layout shows the pipeline: optimizer/ in one sub-package per stage, imports pointing only
to earlier stages, no cycle hidden in a function, and docs/architecture.md naming every package and
module as they are on disk."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"fleetplan": "cli", "fleetplan.optimizer": "optimizer", "fleetplan.models": "models",
           "fleetplan.catalogs": "catalogs"}
LIBRARY = ("optimizer", "models", "catalogs")

# The optimizer's packages in pipeline order: a module imports only from its own package or an
# earlier one (``plan`` is the module that runs stages 1 to 5; ``decisions`` plans many times).
STAGES = ("common", "runtime", "traffic", "problem_data", "mip", "decomposition", "explanation", "plan",
          "decisions", "simulation")
AT_TOP = {"optimizer": {"__init__.py", "plan.py"}, "cli": {"__init__.py", "__main__.py", "main.py"}}
CLI_PACKAGES = ("commands", "rendering")

# Imports left inside a function body in the library, each with its reason.
LAZY_MODULES = {
    "numpy": "loaded when a bound, a matrix or a sweep's draws need it, not by every command's start",
    "highspy": "the solver chosen is the one loaded",
    "ortools": "the solver chosen is the one loaded",
    "pyarrow": "read only for a trace file",
    "matplotlib": "drawn only when a plot is asked for",
    "networkx": "needed only when products share limits",
    "multiprocessing": "worker processes only when a pool is made",
    "concurrent": "worker processes only when a pool is made",
    "threading": "in a worker process only",
    "pyomo": "the modeller is loaded only where a MIP is built: the commitment plan's product split never builds one",
}
# Modules of the package imported inside a function only so that a heavy library stays unloaded
# where it is not needed (not to break a cycle).
LAZY_HEAVY = {
    ("fleetplan.optimizer.decisions.stochastic", "fleetplan.optimizer.mip.formulation"):
        "the fleet MIP (and so Pyomo) only where an outcome's MIP is built; the product split prices outcomes without it",
}
LAZY_CYCLES = {
    ("fleetplan.optimizer.traffic.trace", "fleetplan.optimizer.traffic.scenario"):
        "a trace's size mix is built of the scenario's RequestBucket; the scenario resolves traces",
    ("fleetplan.optimizer.decomposition.product_optimum", "fleetplan.optimizer.decomposition.portfolio"):
        "the rule optimum prices tiers with the portfolio's split_by_tier; the portfolio search uses the rule optimum",
    ("fleetplan.models.roofline", "fleetplan.models.layout"):
        "a multi-GPU layout's step is built on the single-replica roofline step",
    ("fleetplan.catalogs.problems", "fleetplan.catalogs.loader"):
        "the loader reports validation problems through this module, which names entries with the loader's helpers",
}


def _modules() -> dict[str, Path]:
    """Every module of the package, dotted name -> file."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


MODULES = _modules()


def _imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(module imported, inside a function) of every import outside ``if TYPE_CHECKING:``."""
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom) and child.module and not child.level:
                for alias in child.names:
                    full = f"{child.module}.{alias.name}"
                    out.append((full if full in MODULES else child.module, inside))
            elif isinstance(child, ast.Import):
                out.extend((alias.name, inside) for alias in child.names)
            visit(child, inside)

    visit(tree, False)
    return out


def _graph(*, in_functions: bool) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    for name, path in MODULES.items():
        for target, inside in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if target in MODULES and target != name and (in_functions or not inside):
                graph.add_edge(name, target)
    return graph


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["fleetplan", "optimizer"] and len(parts) > 2 else None


def test_optimizer_and_cli_hold_only_their_keepers_at_the_top():
    for folder, keep in AT_TOP.items():
        assert {p.name for p in (ROOT / folder).glob("*.py")} == keep, folder
    stages = {p.name for p in (ROOT / "optimizer").iterdir() if (p / "__init__.py").exists()}
    assert stages == set(STAGES) - {"plan"}
    assert {p.name for p in (ROOT / "cli").iterdir() if (p / "__init__.py").exists()} == set(CLI_PACKAGES)


def test_every_sub_package_says_what_goes_in_and_what_comes_out():
    packages = [ROOT / "optimizer" / s for s in STAGES if s != "plan"] + [ROOT / "cli" / c for c in CLI_PACKAGES]
    for folder in packages:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "In:" in doc and "Out:" in doc, folder
        assert not list(folder.glob("*/__init__.py")), f"{folder}: one level of sub-packages"


def test_no_import_inside_a_function_in_the_library_but_the_listed_ones():
    found = set()
    for name, path in MODULES.items():
        if path.relative_to(ROOT).parts[0] not in LIBRARY:
            continue
        for target, inside in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if inside and target.split(".")[0] not in LAZY_MODULES:
                found.add((name, target))
    assert found == set(LAZY_CYCLES) | set(LAZY_HEAVY)


def test_each_lazy_import_left_breaks_a_real_cycle():
    everything = _graph(in_functions=True)
    for importer, imported in LAZY_CYCLES:
        assert nx.has_path(everything, imported, importer), (importer, imported)


def test_no_import_cycle_among_modules():
    assert list(nx.simple_cycles(_graph(in_functions=False))) == []
    everything = _graph(in_functions=True)
    everything.remove_edges_from(LAZY_CYCLES)
    library = everything.subgraph(n for n in MODULES if MODULES[n].relative_to(ROOT).parts[0] in LIBRARY)
    assert list(nx.simple_cycles(library)) == []


def test_imports_point_only_to_earlier_stages():
    backwards = set()
    for a, b in _graph(in_functions=True).edges:
        sa, sb = _stage(a), _stage(b)
        if sa and sb and sa != sb and STAGES.index(sb) > STAGES.index(sa):
            backwards.add((a, b))
    assert backwards == set()


@pytest.mark.parametrize(("folder", "forbidden"), [
    ("models", ("fleetplan.optimizer", "fleetplan.commands", "fleetplan.rendering", "fleetplan.main")),
    ("catalogs", ("fleetplan.optimizer", "fleetplan.models", "fleetplan.commands", "fleetplan.rendering")),
    ("optimizer", ("fleetplan.commands", "fleetplan.rendering", "fleetplan.main")),
    ("cli/rendering", ("fleetplan.commands", "fleetplan.main")),
    ("cli/commands", ("fleetplan.main",)),
])
def test_arrows_never_point_back_up_the_layers(folder, forbidden):
    wrong = set()
    for path in (ROOT / folder).rglob("*.py"):
        for target, _ in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if target.startswith(forbidden):
                wrong.add((path.relative_to(ROOT).as_posix(), target))
    assert wrong == set()


def _architecture_table() -> dict[str, set[str]]:
    """Package -> modules, from the rows ``| `fleetplan.x` | ... | `a`, `b` |`` of docs/architecture.md."""
    rows = {}
    for line in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`fleetplan(\.\w+)+`", cells[0]):
            rows[cells[0].strip("`")] = set(re.findall(r"`(\w+)`", cells[2]))
    return rows


def test_architecture_page_lists_every_sub_package_and_its_modules():
    on_disk = {}
    for package in [f"fleetplan.optimizer.{s}" for s in STAGES if s != "plan"] + [f"fleetplan.{c}" for c in CLI_PACKAGES]:
        prefix = package + "."
        on_disk[package] = {m[len(prefix):] for m in MODULES if m.startswith(prefix)}
    assert _architecture_table() == on_disk
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    stages_in_order = [text.index(f"`fleetplan.optimizer.{s}`") for s in STAGES]
    assert stages_in_order == sorted(stages_in_order)
