"""MkDocs hook: the reference pages generated from the code, so they cannot drift from it.

A page holding ``<!-- generated: NAME -->`` gets the text of ``GENERATED[NAME]`` in its place at
build time: ``scenario`` (every field of the scenario schema with its type, unit, valid range and
default), ``catalog`` (every field of a catalog entry), ``catalog-sources`` (the source and date of every
shipped entry) and ``formulation`` (one section per
constraint family of the MIP, in build order, from each family's own docstring).
``tests/test_docs.py`` loads this file as the build does and checks what it writes.

The code it reads is imported in one place each (the imports below), so a module that moves is
one line to change here.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import annotated_types
from mkdocs.plugins import event_priority
from pydantic import BaseModel
from pydantic_core import PydanticUndefined


def _scenario_schema() -> type[BaseModel]:
    from fleetplan.optimizer.traffic.scenario import Scenario

    return Scenario


def _uncertainty_schemas() -> dict[str, type[BaseModel]]:
    from fleetplan.optimizer.traffic import uncertainty

    return {"uncertainty": uncertainty.Uncertainty, "uncertainty.outcomes[]": uncertainty.Outcome,
            "uncertainty.sample": uncertainty.Sample, "a distribution": uncertainty.Distribution}


def _catalog_schemas() -> dict[str, type[BaseModel]]:
    from fleetplan.catalogs import schema

    return {"gpus": schema.GPU, "models": schema.LLM, "prices": schema.GPUPrice, "reference": schema.ReferencePrice,
            "api_prices": schema.APIPrice, "harnesses": schema.BenchmarkHarness}


def _shipped_catalog() -> Any:
    from fleetplan.catalogs.loader import load_catalog

    return load_catalog()


def _families() -> tuple[Callable[..., None], ...]:
    from fleetplan.optimizer.mip.formulation import FAMILIES

    return FAMILIES


def _variables_doc() -> str:
    from fleetplan.optimizer.mip.formulation import define_variables

    return inspect.getdoc(define_variables) or ""


def _range_type() -> type:
    from fleetplan.catalogs.fields import Range

    return Range


# What a field means where its schema gives no description.
NOTES = {
    "preset": "modelling preset: `seed` (the method's formula exactly) or `default` (the fitted engine terms)",
    "catalogs": "extra catalog files merged over the shipped catalog, relative to the scenario file",
    "products": "the products to serve (at most 1,000)",
    "products[].name": "the product's name, unique in the scenario",
    "products[].model": "an LLM id from the catalog (`fleetplan catalog list models`)",
    "products[].precision": "weight precision, or a list of them; left out: `options.precisions`, else all",
    "products[].kv_precision": "KV-cache precision (`default` preset); left out: bf16",
    "products[].prefill_gpus": "GPU types a prefill pool may use; left out: `options.prefill_gpus`, else all",
    "products[].demand_profile": "CSV of 24 or 168 rows, `hour,multiplier` (x peak_qps) or `hour,qps`, "
                                 "relative to the scenario file",
    "products[].api": "a hosted-API fallback for part of the tokens",
    "products[].ttft_percentiles_ms.p50": "median TTFT target",
    "products[].ttft_percentiles_ms.p90": "90th-percentile TTFT target",
    "products[].ttft_percentiles_ms.p99": "99th-percentile TTFT target",
    "options": "search restrictions, prices and solver settings",
    "options.gpus": "GPU types searched; left out: every GPU in the catalog",
    "options.tp": "tensor-parallel degrees searched; left out: 1, 2, 4, 8",
    "options.pp": "pipeline stages searched; left out: 1, 2, 4 (more only where the weights do not fit)",
    "options.ep": "expert-parallel degrees (MoE); left out: 1, tp, tp x dp_attention; listed: exactly these",
    "options.dp_attention": "attention data-parallel ranks (MoE); left out: 1, 8, 16, 32, 64",
    "options.batch": "batches searched; left out: every batch from 1 to `max_batch`",
    "options.precisions": "weight precisions searched for products that name none",
    "options.gpu_hour_usd": "on-demand price overrides by GPU id",
    "options.price_provider": "use this provider's on-demand prices where it has one",
    "options.engine": "the serving engine whose fitted terms the plan uses; left out: none (their mean)",
    "options.prefill_gpus": "GPU types a prefill pool may use",
    "options.tiers": "pricing tiers capacity may be bought in",
    "options.reserved_gpu_hour_usd": "reserved price overrides by GPU id",
    "options.spot_gpu_hour_usd": "spot price overrides by GPU id",
    "options.mip_rel_gap": "relative optimality gap at which a MIP counts as proven",
    "limits": "limits the products share",
    "limits.monthly_budget_usd": "the most the plan may cost a month",
    "limits.allow_pooling": "products of one model may share one pool of replicas",
}

# What a field of the ``uncertainty:`` block means where its schema gives no description.
UNCERTAINTY_NOTES = {
    "outcomes": "listed outcomes, probabilities summing to 1 (give this or `sample`)",
    "sample": "outcomes drawn from distributions (give this or `outcomes`)",
    "terms": "commitment terms offered",
    "term_gpu_hour_usd": "term prices of your own by term and GPU id",
    "risk_weight": "weight of CVaR_alpha of the outcomes' cost added to the expected cost",
    "cvar_alpha": "the CVaR's level: the mean of the worst 1 - alpha of the outcomes",
    "method": "`extensive` (one MIP), `decomposition` (by outcome, proven bound) or `auto`",
    "max_gap": "proven relative gap the decomposition stops at",
    "max_iterations": "Lagrangian rounds the decomposition may run",
    "name": "the outcome's name, unique in the block",
    "probability": "the outcome's probability",
    "demand_scale": "every product's QPS times this, hour by hour, or a map by product name; each in (0, 100]",
    "demand_profile": "products' hourly profiles replaced: 24 or 168 multipliers of `peak_qps`, or a profile "
                      "CSV relative to the scenario file (`hour,multiplier` or `hour,qps`)",
    "mix_shares": "products' request-mix shares replaced, one per bucket of `requests:` in order, summing to 1 "
                  "(0 leaves a bucket out)",
    "long_prompt_shift": "the share of long-prompt requests (buckets whose prompt is longer than the mix's mean) "
                         "times this, the other buckets lowered in proportion; a number or a map by product name, each in "
                         "(0, 100], at most 1 / the long-prompt share",
    "spot_max_share": "share of GPUs that may run on spot in any hour; left out: `options.spot_max_share`",
    "spot_preemption": "share of spot replica-hours lost to preemption, each served by an on-demand replica-hour",
    "on_demand_price_scale": "on-demand GPU-hour prices times this",
    "spot_price_scale": "spot GPU-hour prices times this",
    "api_price_scale": "hosted-API prices times this",
    "scenarios": "outcomes drawn, each of probability 1 / scenarios",
    "seed": "the generator's seed: the same outcomes on every machine",
    "distribution": "`uniform` (low, high), `normal` (mean, std), `lognormal` (mean, std of the logarithm) or "
                    "`choice` (values, weights)",
    "low": "lower end (uniform), or the clip below of any distribution",
    "high": "upper end (uniform), or the clip above of any distribution",
    "mean": "mean (normal), or mean of the logarithm (lognormal)",
    "std": "standard deviation (normal), or of the logarithm (lognormal)",
    "values": "the values of a `choice`",
    "weights": "their probabilities, summing to 1; left out: equal",
}
# The sampled fields: each a distribution its draws are clipped to the field's range from.
SAMPLE_NOTES = {
    "demand_scale": "every product's `demand_scale`, drawn (clipped to [0.001, 100])",
    "spot_max_share": "`spot_max_share`, drawn (clipped to [0, 1])",
    "on_demand_price_scale": "`on_demand_price_scale`, drawn (clipped to [0.001, 10])",
    "spot_price_scale": "`spot_price_scale`, drawn (clipped to [0.001, 10])",
    "api_price_scale": "`api_price_scale`, drawn (clipped to [0.001, 10])",
    "mix_shift": "every mix's `long_prompt_shift`, drawn (clipped to [0.001, 100]; above 1 / the long-prompt "
                 "share, every request is long)",
    "spot_preemption": "`spot_preemption`, drawn (clipped to [0, 1])",
}

SUFFIX_UNITS = (("_usd_per_million_tokens", "USD per million tokens"), ("_usd_per_gpu_hour", "USD per GPU-hour"),
                ("_monthly_usd", "USD per month"), ("_usd", "USD"), ("_ms", "milliseconds"), ("_s", "seconds"),
                ("_qps", "queries per second"), ("_bytes_per_s", "bytes per second"), ("_bytes", "bytes"),
                ("_tokens", "tokens"))


def _md(text: str) -> str:
    """Docstring text as Markdown: reST roles and double backticks become code spans."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: f"`{m[1].rsplit('.', 1)[-1]}`", text)
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(a) for a in typing.get_args(annotation) if typing.get_origin(annotation) is not dict)


def _type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(a) for a in args if a is not type(None))
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"map of {_type_text(args[0])} to {_type_text(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping (below)"
    return {str: "text", int: "whole number", float: "number", bool: "`true` \\| `false`"}.get(
        annotation, getattr(annotation, "__name__", str(annotation)))


def _metadata(annotation: Any, own: list[Any]) -> list[Any]:
    """The constraints on a field: its own and those inside its type (a list's items, a map's values)."""
    found = list(own)
    if typing.get_origin(annotation) is typing.Annotated:
        found += list(annotation.__metadata__)
    for arg in typing.get_args(annotation):
        if not isinstance(arg, (str, int, float)):
            found += _metadata(arg, [])
    return found


def _valid(meta: list[Any]) -> tuple[str, str]:
    """(unit, valid values) from a field's constraints."""
    range_type = _range_type()
    for m in meta:
        if isinstance(m, range_type):
            return m.unit, f"{m.describe()}: {m.reason}"
    words = {annotated_types.Gt: "above {}", annotated_types.Ge: "at least {}", annotated_types.Lt: "below {}",
             annotated_types.Le: "at most {}", annotated_types.MinLen: "at least {} long"}
    parts = []
    for m in meta:
        for kind, word in words.items():
            if isinstance(m, kind):
                parts.append(word.format(getattr(m, dataclasses.fields(m)[0].name)))
    return "", ", ".join(parts)


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, list):
        value = [v.value if isinstance(v, enum.Enum) else v for v in value]
    if isinstance(value, BaseModel):
        return "all defaults"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def scenario_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, pydantic field) of every field of ``model`` and of the models inside it."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append((path, field))
        for inner in _models_in(field.annotation):
            out += scenario_fields(inner, f"{path}[]." if _is_list(field.annotation) else f"{path}.")
    return out


def _unit(path: str, unit: str) -> str:
    if unit:
        return unit
    name = path.rsplit(".", 1)[-1]
    return next((u for suffix, u in SUFFIX_UNITS if name.endswith(suffix)), "")


def field_table(model: type[BaseModel], notes: dict[str, str] | None = None, inner: bool = True) -> str:
    """A Markdown table of every field of ``model`` (and of the models inside it unless not
    ``inner``): type, unit, valid values, default, meaning."""
    notes = notes or {}
    rows = ["| field | type | unit | valid values | default | meaning |", "|---|---|---|---|---|---|"]
    for path, field in scenario_fields(model) if inner else list(model.model_fields.items()):
        unit, valid = _valid(_metadata(field.annotation, list(field.metadata)))
        meaning = field.description or notes.get(path, "")
        rows.append(f"| `{path}` | {_type_text(field.annotation)} | {_cell(_unit(path, unit))} | {_cell(valid)} "
                    f"| {_default(field)} | {_cell(meaning)} |")
    return "\n".join(rows) + "\n"


def scenario_reference() -> str:
    """The scenario reference: every field of the schema, in the order a file gives them."""
    schema = _scenario_schema()
    return (f"{_md(inspect.getdoc(schema) or '')}\n\n"
            "A path `products[].api.model` names the field `model` of the mapping `api` of an entry of the list "
            "`products`. Every number is checked against its range when the file is read; a field not listed "
            "here is refused, naming the nearest valid one.\n\n" + field_table(schema, NOTES))


def uncertainty_reference() -> str:
    """Every field of the ``uncertainty:`` block (``fleetplan commit``), one table per mapping in it."""
    parts = []
    for where, model in _uncertainty_schemas().items():
        title = f"`{where}`" if where.startswith("uncertainty") else where
        notes = {**UNCERTAINTY_NOTES, **SAMPLE_NOTES} if where == "uncertainty.sample" else UNCERTAINTY_NOTES
        parts.append(f"### {title}\n\n{_md(inspect.getdoc(model) or '')}\n\n{field_table(model, notes, inner=False)}")
    return "\n".join(parts)


def catalog_reference() -> str:
    """Every field of each kind of catalog entry, one table per section of a catalog file."""
    parts = []
    for section, model in _catalog_schemas().items():
        parts.append(f"### `{section}`\n\n{_md(inspect.getdoc(model) or '')}\n\n{field_table(model)}")
    return "\n".join(parts)


def catalog_sources() -> str:
    """Each shipped GPU and model with where its figures come from and when, and how many price
    rows each source gives."""
    cat = _shipped_catalog()
    rows = ["| entry | id | source | as of |", "|---|---|---|---|"]
    for kind, entries in (("GPU", cat.gpus), ("model", cat.models), ("reference price", cat.reference),
                          ("API price", cat.api_prices), ("benchmark harness", cat.harnesses)):
        for key, e in sorted(entries.items()):
            rows.append(f"| {kind} | `{key}` | {_cell(e.source)} | {e.as_of} |")
    prices: dict[tuple[str, str], int] = {}
    for price in cat.prices:
        prices[(price.source, str(price.as_of))] = prices.get((price.source, str(price.as_of)), 0) + 1
    rows += ["", "| GPU-hour price rows | source | as of |", "|---|---|---|"]
    rows += [f"| {n} | {_cell(src)} | {when} |" for (src, when), n in sorted(prices.items())]
    return "\n".join(rows) + "\n"


def _family_function(family: Callable[..., None]) -> Callable[..., None]:
    """The ``define_*`` function behind ``family`` (a family stated for one side wraps one)."""
    inner = inspect.getclosurevars(family).nonlocals.get("family")
    return inner if callable(inner) else family


def formulation_reference() -> str:
    """One section per constraint family of the MIP, in the order the model builds them."""
    parts = ["**Variables.** " + _md(_variables_doc()), ""]
    for family in _families():
        fn = _family_function(family)
        side = family.__name__[len(fn.__name__):]
        where = f" Stated here for the {'prefill pool' if 'pool' in side else 'decode'} side." if side else ""
        parts += [f"## `{family.__name__}`", "", _md(inspect.getdoc(fn) or "") + where, "",
                  f"Code: `{fn.__module__}.{fn.__name__}`", ""]
    return "\n".join(parts)


GENERATED: dict[str, Callable[[], str]] = {
    "scenario": scenario_reference, "uncertainty": uncertainty_reference, "catalog": catalog_reference,
    "catalog-sources": catalog_sources,
    "formulation": formulation_reference,
}


def fill(markdown: str) -> str:
    """``markdown`` with each ``<!-- generated: NAME -->`` marker followed by its generated text."""
    for name, make in GENERATED.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, f"{marker}\n\n{make()}")
    return markdown


@event_priority(100)  # before mkdocstrings sets up its loader from the search paths
def on_config(config: Any, **_: Any) -> Any:
    """MkDocs event: keep the API reference's loader off the ``fleetplan`` console script.

    Run as ``mkdocs build``, the interpreter's first search path is the environment's ``bin/``
    folder, which holds the ``fleetplan`` script; the docstring loader would take that file for
    the package. The folder is dropped from the search paths (nothing imports from it)."""
    sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "fleetplan").is_file()]
    return config


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: fill the generated sections of a page."""
    return fill(markdown)


SPHINX_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):<code>(~?)([^<]+)</code>")


def _plain_role(match: re.Match[str]) -> str:
    """``:func:`~a.b.c``` reads as ``c`` (the tilde's meaning in Sphinx), else the whole name."""
    name = match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if match.group(1) else name}</code>"


def on_page_content(html: str, **_: Any) -> str:
    """Docstrings cross-reference in Sphinx roles (``:func:`name```); the API page shows the name as
    code, not the role's markup."""
    return SPHINX_ROLE.sub(_plain_role, html)
