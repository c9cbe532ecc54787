"""Adding a model to a user catalog (catalogs/user.py): merge order, replaced ids, shipped ids,
and a result that must load over the shipped catalog."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleetplan.catalogs import load_catalog
from fleetplan.catalogs.hf_config import entry_from_hf_config
from fleetplan.catalogs.loader import CatalogError
from fleetplan.catalogs.user import check_model_id, merge_model

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
}


def entry(model_id: str, name: str | None = None) -> dict[str, Any]:
    e = entry_from_hf_config(LLAMA_8B, model_id, source="config.json (test)")
    if name:
        e["name"] = name
    return e


def test_new_id_into_a_new_catalog():
    merged = merge_model(None, entry("mine"), replace=False, where="mine.yaml")
    assert [m["id"] for m in merged["models"]] == ["mine"]
    assert load_catalog(documents=[(merged, "mine.yaml")]).models["mine"].num_layers == 32


def test_new_id_goes_last_and_the_rest_is_kept_in_order():
    user = {"models": [entry("a"), entry("b")], "api_prices": []}
    before = copy.deepcopy(user)
    merged = merge_model(user, entry("c"), replace=False, where="mine.yaml")
    assert list(merged) == ["models", "api_prices"]
    assert [m["id"] for m in merged["models"]] == ["a", "b", "c"]
    assert user == before  # the caller's data is not changed


def test_an_id_already_in_the_user_catalog_is_replaced_without_replace():
    user = {"models": [entry("a", "old a"), entry("b")]}
    merged = merge_model(user, entry("a", "new a"), replace=False, where="mine.yaml")
    assert [(m["id"], m["name"]) for m in merged["models"]] == [("b", "b"), ("a", "new a")]


def test_a_shipped_id_is_refused_without_replace():
    with pytest.raises(CatalogError) as err:
        merge_model(None, entry("llama-3.1-8b"), replace=False, where="mine.yaml")
    message = str(err.value)
    assert message.startswith("model_id: 'llama-3.1-8b' is a model of the shipped catalog (Llama 3.1 8B)")
    assert "catalog mine.yaml" in message and "llama-3.1-8b-custom" in message and "pass replace" in message
    assert "--" not in message  # the library names its parameters; the command shows its flags:
    from fleetplan.commands.io import error_text

    shown = error_text(err.value)
    assert shown.startswith("--id: 'llama-3.1-8b' is a model of the shipped catalog (Llama 3.1 8B)")
    assert "--catalog mine.yaml" in shown and "pass --replace" in shown
    with pytest.raises(CatalogError, match="llama-3.1-8b-custom"):
        check_model_id("llama-3.1-8b", replace=False, where="mine.yaml")


def test_a_shipped_id_shadows_the_shipped_model_with_replace():
    merged = merge_model(None, entry("llama-3.1-8b", "my 8B"), replace=True, where="mine.yaml")
    shadowed = load_catalog(documents=[(merged, "mine.yaml")]).models["llama-3.1-8b"]
    assert shadowed.name == "my 8B" and load_catalog().models["llama-3.1-8b"].name == "Llama 3.1 8B"
    check_model_id("llama-3.1-8b", replace=True, where="mine.yaml")  # no error


@pytest.mark.parametrize(("user", "words"), [
    (["a list"], "mine.yaml: not a catalog file (expected a mapping)"),
    ({"models": "text"}, "mine.yaml: models: must be a list of entries"),
    ({"gpus": [{"id": "x"}]}, "mine.yaml: gpus[x]: missing source"),
])
def test_a_user_catalog_that_cannot_hold_the_model_is_refused(user, words):
    with pytest.raises(CatalogError) as err:
        merge_model(user, entry("mine"), replace=False, where="mine.yaml")
    assert words in str(err.value)


def test_an_invalid_entry_is_refused_naming_the_file_and_the_entry():
    bad = {**entry("mine"), "active_params": 9e12}
    with pytest.raises(CatalogError, match=r"mine\.yaml: models\[mine\]: active_params exceeds total_params"):
        merge_model({}, bad, replace=False, where="mine.yaml")
