"""A user's catalog file extended with one model: the checks and the merge, not the file.

Owns the rules of ``fleetplan catalog add-model``: an id of the shipped catalog is taken only
on purpose (``replace``), an entry with the new entry's id is replaced, and the result must
load, merged over the shipped catalog, before anyone writes it. It reads and writes no file
(the command line does) and knows nothing of Hugging Face configs (:mod:`.hf_config`).
"""

from __future__ import annotations

from typing import Any

from fleetplan.catalogs.loader import CatalogError, load_catalog


def check_model_id(model_id: str, replace: bool, where: str) -> None:
    """Refuse ``model_id`` when it names a model of the shipped catalog and ``replace`` is false:
    the entry would replace the shipped model wherever the user catalog ``where`` is given.

    Raises :class:`CatalogError` naming the ``model_id`` parameter, a free id to use instead and ``replace``.
    """
    shipped = load_catalog().models
    if model_id in shipped and not replace:
        raise CatalogError(
            f"`model_id`: {model_id!r} is a model of the shipped catalog ({shipped[model_id].name}); an entry with this "
            f"id would replace it wherever `catalog` {where} is given: choose another id (e.g. {model_id}-custom) "
            f"or pass `replace` to replace it on purpose", parameters=("model_id", "catalog", "replace"),
        )


def merge_model(user_catalog: Any, entry: dict[str, Any], replace: bool, where: str) -> dict[str, Any]:
    """The user catalog with the model ``entry`` added, checked; the input is left unchanged.

    ``user_catalog`` is the parsed file (empty for a new one) named ``where`` in
    messages. A model entry with the same id is replaced (the new entry goes last); the other
    sections and entries are kept in their order. Raises :class:`CatalogError` when the id
    names a shipped model without ``replace`` (:func:`check_model_id`), when the file is not a
    mapping, or when the result does not load over the shipped catalog (every problem named).
    """
    check_model_id(str(entry.get("id")), replace, where)
    doc = user_catalog or {}  # an empty file is a new catalog
    if not isinstance(doc, dict):
        raise CatalogError(f"{where}: not a catalog file (expected a mapping)")
    models = doc.get("models") or []
    if not isinstance(models, list):
        raise CatalogError(f"{where}: models: must be a list of entries")
    kept = [m for m in models if not (isinstance(m, dict) and m.get("id") == entry.get("id"))]
    merged = {**doc, "models": [*kept, entry]}
    load_catalog(documents=[(merged, where)])
    return merged
