"""The documentation cannot rot: every code block of README.md and docs/ runs or parses, the README
stays a short page, and the generated references name every scenario field and MIP family.

Blocks are read by their fence's language:

- ``python``: executed, in a fresh namespace, in the page's folder (a copy of ``examples/``);
- ``bash`` / ``console``: each command that starts with ``fleetplan`` or ``python -m fleetplan``
  (after a ``$`` prompt in ``console``) runs there too, in order, and must exit 0; other lines
  (installing, running the tests, starting a cluster) are not run;
- ``yaml``: parses, and a document with ``products`` validates as a scenario with fleetplan's
  own loader (relative paths read from ``examples/``) unless the block is marked a fragment;
- ``text``, ``json``, ``csv``: output and listings, not run (``json`` must parse).

A fence without a language fails: every block says what it is. A comment line
``<!-- docs-test: slow -->`` right before a fence puts its test under the ``slow`` marker;
``<!-- docs-test: fragment -->`` marks a YAML excerpt that is not a whole scenario.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 200
LANGUAGES = {"python", "bash", "console", "yaml", "text", "json", "csv"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
MARK = re.compile(r"<!--\s*docs-test:\s*(?P<mark>[\w-]+)\s*-->\s*$")
COMMAND_TIMEOUT_S = 300


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its text and its marks."""

    path: Path
    line: int
    lang: str
    body: str
    marks: frozenset[str]

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        body = "\n".join(ln[len(m["indent"]):] for ln in m["body"].split("\n"))
        out.append(Block(path, text.count("\n", 0, m.start()) + 1, m["lang"], body,
                         frozenset([mark["mark"]] if mark else [])))
    return out


ALL_BLOCKS = [b for p in markdown_files() for b in blocks_of(p)]


def params(langs: set[str]) -> list[object]:
    return [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if "slow" in b.marks else [])
            for b in ALL_BLOCKS if b.lang in langs]


_FOLDERS: dict[Path, Path] = {}


@pytest.fixture()
def workdir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            monkeypatch: pytest.MonkeyPatch) -> Path:
    """The page's folder: copies of the shipped examples and measurement data, as after a checkout.
    A page's blocks share it and run in order, as a reader follows the page (a plan written by one
    block is read by the next)."""
    page = request.node.callspec.params["block"].path
    if page not in _FOLDERS:
        folder = tmp_path_factory.mktemp("docs")
        shutil.copytree(ROOT / "examples", folder / "examples")
        shutil.copytree(ROOT / "benchmarks" / "data", folder / "benchmarks" / "data")
        _FOLDERS[page] = folder
    monkeypatch.chdir(_FOLDERS[page])
    return _FOLDERS[page]


def test_every_block_names_a_language_the_tests_know():
    unknown = [f"{b.id} ({b.lang or 'no language'})" for b in ALL_BLOCKS if b.lang not in LANGUAGES]
    assert not unknown, "mark each block python, bash, console, yaml, text, json or csv: " + ", ".join(unknown)


def test_the_docs_hold_blocks_of_each_runnable_kind():
    kinds = {b.lang for b in ALL_BLOCKS}
    assert {"python", "bash", "yaml"} <= kinds and len(ALL_BLOCKS) > 40


def test_the_readme_is_a_short_page_that_starts_with_the_set_up_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    first = blocks_of(ROOT / "README.md")[0]
    # CI installs and tests exactly as the README's first block says
    assert first.lang == "bash" and 'python -m pip install ".[test]"' in first.body
    assert "python -m pytest" in first.body
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'python -m pip install ".[test]"' in ci and "python -m pytest" in ci and "mkdocs build --strict" in ci


def commands_of(block: Block) -> list[list[str]]:
    """The fleetplan commands of a shell block, in order, as argument lists."""
    text = re.sub(r"\\\n\s*", " ", block.body)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if block.lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words[:1] == ["fleetplan"]:
                out.append(words[1:])
            elif words[:3] == ["python", "-m", "fleetplan"]:
                out.append(words[3:])
    return out


def run_shell(block: Block, workdir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "CI")}
    for argv in commands_of(block):
        for target in argv:  # an output folder named in the docs exists, as the text says it must
            if target.endswith("/") and not target.startswith("-"):
                (workdir / target).mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "fleetplan", *argv], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{block.id}: fleetplan {shlex.join(argv)}\n{done.stderr[-2000:]}"


def run_python(block: Block) -> None:
    exec(compile(block.body, block.id, "exec"), {"__name__": "__docs__"})  # noqa: S102 - the docs' own examples


def check_yaml(block: Block) -> None:
    import fleetplan

    doc = yaml.safe_load(block.body)
    assert isinstance(doc, (dict, list)), block.id
    if isinstance(doc, dict) and "products" in doc and "fragment" not in block.marks:
        scenario = fleetplan.load_scenario(doc, folder=ROOT / "examples")
        assert [p.name for p in scenario.products] == [p["name"] for p in doc["products"]]


@pytest.mark.parametrize("block", params({"python", "bash", "console", "yaml", "json"}))
def test_block(block: Block, workdir: Path):
    """Each block as its language says, in page order (a page's blocks share its folder)."""
    if block.lang in ("bash", "console"):
        run_shell(block, workdir)
    elif block.lang == "python":
        run_python(block)
    elif block.lang == "yaml":
        check_yaml(block)
    else:
        json.loads(block.body)


def reference_hook():
    """The mkdocs hook that generates the reference pages, loaded as the build loads it."""
    spec = importlib.util.spec_from_file_location("docs_references", DOCS / "hooks" / "references.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scenario_reference_names_every_field_with_its_range_and_default():
    from fleetplan.optimizer.traffic.scenario import Scenario

    hook = reference_hook()
    page = hook.scenario_reference()
    for path, field in hook.scenario_fields(Scenario):
        assert f"`{path}`" in page, path
    assert len(hook.scenario_fields(Scenario)) > 50
    # a hand-checked row: peak_qps, its unit, its range and reason, and its default
    row = next(ln for ln in page.splitlines() if ln.startswith("| `products[].peak_qps`"))
    assert "queries per second" in row and "from 0 to 1e+07" in row and "ten million requests" in row
    row = next(ln for ln in page.splitlines() if ln.startswith("| `options.time_limit_s`"))
    assert "from 0.01 to 1e+06" in row and "seconds" in row
    row = next(ln for ln in page.splitlines() if ln.startswith("| `options.max_batch`"))
    assert "`512`" in row and "a whole number from 1 to 65536" in row


def test_the_uncertainty_reference_names_every_field_of_the_block():
    from fleetplan.optimizer.traffic import uncertainty

    page = reference_hook().uncertainty_reference()
    for model in (uncertainty.Uncertainty, uncertainty.Outcome, uncertainty.Sample, uncertainty.Distribution):
        for name in model.model_fields:
            row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{name}`"))
            assert row.split("|")[-2].strip(), f"{name} has no meaning"
    row = next(ln for ln in page.splitlines() if ln.startswith("| `spot_preemption` | number"))
    assert "at least 0.0, at most 1.0" in row and "`0.0`" in row


def test_the_formulation_page_has_one_section_per_constraint_family_in_build_order():
    from fleetplan.optimizer.mip.formulation import FAMILIES

    page = reference_hook().formulation_reference()
    heads = [ln[3:] for ln in page.splitlines() if ln.startswith("## ")]
    assert heads == [f"`{f.__name__}`" for f in FAMILIES]
    assert "usable decode throughput plus API tokens cover demand" in page  # a family's own docstring


def test_the_hook_fills_the_reference_pages():
    hook = reference_hook()
    pages = {p: p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md")}
    for marker, make in hook.GENERATED.items():
        [page] = [text for text in pages.values() if f"<!-- generated: {marker} -->" in text]
        assert make() in hook.fill(page)


def test_the_api_reference_finds_every_public_name_with_its_docstring():
    """The API page's loader (griffe, as mkdocstrings runs it) finds the package as installed and a
    docstring for every name the package exports from its API module."""
    import griffe

    import fleetplan.commands.api

    api = griffe.load("fleetplan.commands.api", search_paths=[p for p in sys.path if p and not (Path(p) / "fleetplan").is_file()])
    for name in fleetplan.commands.api.__all__:
        try:
            doc = api[name].docstring
        except griffe.AliasResolutionError:  # re-exported from a folder an editable install maps elsewhere
            obj = getattr(fleetplan.commands.api, name)
            assert not (inspect.isclass(obj) or inspect.isfunction(obj)) or obj.__doc__, name  # a type alias has none
            continue
        assert doc is not None and doc.value.strip(), name
    page = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    assert "::: fleetplan.commands.api" in page
    assert all(f"        - {name}\n" in page for name in fleetplan.commands.api.__all__)


def test_the_api_page_shows_sphinx_roles_as_code_names():
    hook = reference_hook()
    html = ("Owns the functions :mod:<code>fleetplan</code> exports; :meth:<code>~fleetplan.Plan.to_json</code> "
            "writes; :class:<code>InputError</code> raised")
    assert hook.on_page_content(html) == ("Owns the functions <code>fleetplan</code> exports; <code>to_json</code> "
                                          "writes; <code>InputError</code> raised")
