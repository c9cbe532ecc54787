"""Load, validate and merge catalog files.

The shipped catalog (``data/*.yaml``) is read first; user files given as the ``catalog`` parameter (``--catalog``)
are merged on top, entry by entry: an entry whose key already exists has the given
fields replaced, a new key adds an entry. Every entry is validated after merging, and
every problem of every entry is reported on one line naming the file, the entry and the fields.

Owns reading and merging catalogs; it never plans and never writes a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from fleetplan.catalogs.files import MAX_CATALOG_FILES, InputError, parse_yaml, read_text, short_repr
from fleetplan.catalogs.schema import GPU, LLM, APIPrice, BenchmarkHarness, GPUPrice, ReferencePrice
from fleetplan.catalogs.problems import entry_problems, join_problems
import difflib

DATA_DIR = Path(__file__).resolve().parent / "data"
SHIPPED_FILES = ("gpus.yaml", "models.yaml", "prices.yaml", "api_prices.yaml", "benchmark_harnesses.yaml")


class CatalogError(InputError):
    """A catalog file or entry is invalid."""


def nearest(word: str, choices: Iterable[str]) -> str:
    """Return ``" (nearest: X)"`` for the closest valid choice, or a short list of valid ones."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.3)
    if close:
        return f" (nearest valid choice: {close[0]})"
    shown = ", ".join(choices[:8]) + (", ..." if len(choices) > 8 else "")
    return f" (valid choices: {shown})"


def _model_at(schema: Any, loc: tuple[Any, ...]) -> Any:
    """The pydantic model reached from ``schema`` along the field names of ``loc`` (list
    indices skipped), or None."""
    model = schema
    for part in loc:
        if isinstance(part, int):
            continue
        field_info = model.model_fields.get(part) if model is not None else None
        if field_info is None:
            return None
        model = _inner_model(field_info.annotation)
    return model


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _inner_model(arg)) is not None:
            return found
    return None


def first_error(err: ValidationError) -> Any:
    """The error to report: an unknown field first (a misspelt name also shows up as a missing
    one, and the unknown field is the one to correct), else the first."""
    errors = err.errors()
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def format_validation_error(err: ValidationError, where: str, schema: Any = None) -> str:
    """One line naming ``where`` and the first failing field of a pydantic error; an unknown
    field of ``schema`` (the model validated) comes with the nearest known field."""
    first = first_error(err)
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")  # our validators' own messages stand alone
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
        model = _model_at(schema, tuple(first["loc"][:-1])) if schema is not None else None
        if model is not None:
            msg += nearest(str(first["loc"][-1]), model.model_fields)
    got = first.get("input")
    quiet = first["type"] in ("missing", "extra_forbidden") or isinstance(got, dict) or "(got " in msg
    got_txt = "" if quiet else f" (got {short_repr(got)})"
    more = len(err.errors()) - 1
    tail = f" [and {more} more problem{'s' if more > 1 else ''}]" if more else ""
    return f"{where}.{loc}: {msg}{got_txt}{tail}" if loc else f"{where}: {msg}{got_txt}{tail}"


@dataclass(frozen=True)
class _Section:
    name: str
    schema: type[BaseModel]
    key_fields: tuple[str, ...]


SECTIONS: dict[str, _Section] = {
    "gpus": _Section("gpus", GPU, ("id",)),
    "models": _Section("models", LLM, ("id",)),
    "prices": _Section("prices", GPUPrice, ("gpu", "provider", "kind", "region")),
    "reference": _Section("reference", ReferencePrice, ("gpu",)),
    "api_prices": _Section("api_prices", APIPrice, ("id",)),
    "harnesses": _Section("harnesses", BenchmarkHarness, ("id",)),
}


@dataclass
class Catalog:
    """Everything the planner knows about hardware, models and prices, validated."""

    gpus: dict[str, GPU] = field(default_factory=dict)
    models: dict[str, LLM] = field(default_factory=dict)
    prices: list[GPUPrice] = field(default_factory=list)
    reference: dict[str, ReferencePrice] = field(default_factory=dict)
    api_prices: dict[str, APIPrice] = field(default_factory=dict)
    harnesses: dict[str, BenchmarkHarness] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def gpu(self, gpu_id: str, what: str = "gpu") -> GPU:
        """The GPU ``gpu_id``, or a one-line error naming the nearest known id."""
        try:
            return self.gpus[gpu_id]
        except KeyError:
            raise CatalogError(f"{what}: unknown GPU id {gpu_id!r}{nearest(gpu_id, self.gpus)}") from None

    def model(self, model_id: str, what: str = "model") -> LLM:
        """The LLM ``model_id``, or a one-line error naming the nearest known id."""
        try:
            return self.models[model_id]
        except KeyError:
            raise CatalogError(f"{what}: unknown model id {model_id!r}{nearest(model_id, self.models)}") from None

    def harness_for(self, source_id: str) -> BenchmarkHarness | None:
        """The benchmark harness with the longest of its ``source_id_prefixes`` that starts
        ``source_id`` (on a tie, the first id in sorted order), or None."""
        best: BenchmarkHarness | None = None
        longest = 0
        for harness_id in sorted(self.harnesses):
            harness = self.harnesses[harness_id]
            for prefix in harness.source_id_prefixes:
                if source_id.startswith(prefix) and len(prefix) > longest:
                    best, longest = harness, len(prefix)
        return best

    def reference_price(self, gpu_id: str) -> ReferencePrice | None:
        """The reference GPU-hour price of ``gpu_id``, if the catalog has one."""
        return self.reference.get(gpu_id)

    def prices_for(self, gpu_id: str, kind: str | None = None) -> list[GPUPrice]:
        """Provider prices of ``gpu_id`` (optionally of one pricing kind), cheapest first."""
        rows = [p for p in self.prices if p.gpu == gpu_id and (kind is None or p.kind == kind)]
        return sorted(rows, key=lambda p: (p.usd_per_gpu_hour, p.provider))


def _key(section: _Section, raw: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(raw.get(k) for k in section.key_fields)


def _label(section: _Section, raw: Mapping[str, Any], index: int) -> str:
    key = [str(raw.get(k)) for k in section.key_fields if raw.get(k) is not None]
    return f"{section.name}[{'/'.join(key) if key else index}]"


def _merge_document(
    raw_sections: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], str]]], doc: Any, path: str
) -> None:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise CatalogError(f"{path}: a catalog file must be a mapping with sections {', '.join(SECTIONS)}")
    for name, entries in doc.items():
        if name not in SECTIONS:
            raise CatalogError(f"{path}: unknown section {name!r}{nearest(str(name), SECTIONS)}")
        section = SECTIONS[name]
        if not isinstance(entries, list):
            raise CatalogError(f"{path}: {name}: must be a list of entries")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise CatalogError(f"{path}: {name}[{i}]: must be a mapping of fields")
            missing = [k for k in section.key_fields if k != "region" and entry.get(k) is None]
            if missing:
                raise CatalogError(f"{path}: {name}[{i}].{missing[0]}: Field required")
            key = _key(section, entry)
            where = f"{path}: {_label(section, entry, i)}"
            if key in raw_sections[name]:
                base, _ = raw_sections[name][key]
                raw_sections[name][key] = ({**base, **entry}, where)
            else:
                raw_sections[name][key] = (dict(entry), where)


def load_catalog(extra_files: Iterable[Path | str] = (), include_shipped: bool = True,
                 documents: Iterable[tuple[Any, str]] = ()) -> Catalog:
    """Load the shipped catalog and merge ``extra_files`` over it, then ``documents`` (catalogs
    already parsed, each with the name its messages give), validating every entry."""
    raw: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], str]]] = {n: {} for n in SECTIONS}
    files: list[str] = []
    if include_shipped:
        for name in SHIPPED_FILES:
            resource = DATA_DIR / name
            if resource.is_file():
                _merge_document(raw, parse_yaml(resource.read_text(encoding="utf-8"), name, CatalogError), f"catalogs/data/{name}")
                files.append(f"catalogs/data/{name}")
    extra_files = list(extra_files)
    if len(extra_files) > MAX_CATALOG_FILES:
        raise CatalogError(f"`catalog`: {len(extra_files):,} extra catalog files (a scenario's catalogs: and `catalog` "
                           f"together); a command merges at most {MAX_CATALOG_FILES}: merge them into fewer files",
                           parameters=("catalog",))
    for extra in extra_files:
        path = Path(extra)
        text = read_text(path, "file", CatalogError, "`catalog`: ")
        _merge_document(raw, parse_yaml(text, path, CatalogError), str(path))
        files.append(str(path))
    for doc, name in documents:
        _merge_document(raw, doc, name)
        files.append(name)

    catalog = Catalog(files=files)
    problems: list[str] = []  # every invalid entry, reported together
    for name, section in SECTIONS.items():
        for entry, where in raw[name].values():
            try:
                obj = section.schema.model_validate(entry)
            except ValidationError as err:
                problems.append(entry_problems(err, where, section.schema))
                continue
            if name == "gpus":
                catalog.gpus[obj.id] = obj  # type: ignore[attr-defined]
            elif name == "models":
                catalog.models[obj.id] = obj  # type: ignore[attr-defined]
            elif name == "prices":
                catalog.prices.append(obj)  # type: ignore[arg-type]
            elif name == "reference":
                catalog.reference[obj.gpu] = obj  # type: ignore[attr-defined]
            elif name == "harnesses":
                catalog.harnesses[obj.id] = obj  # type: ignore[attr-defined]
            else:
                catalog.api_prices[obj.id] = obj  # type: ignore[attr-defined]
    if problems:
        raise CatalogError(join_problems(problems))
    _check_references(catalog, raw)
    return catalog


def _check_references(catalog: Catalog, raw: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], str]]]) -> None:
    """Every price must name a GPU the catalog knows."""
    for name in ("prices", "reference"):
        for entry, where in raw[name].values():
            gpu = entry.get("gpu")
            if gpu not in catalog.gpus:
                raise CatalogError(f"{where}.gpu: unknown GPU id {gpu!r}{nearest(str(gpu), catalog.gpus)}")
