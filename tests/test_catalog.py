"""The shipped catalog is complete and sourced; user files merge; bad files fail with one clear line."""

from __future__ import annotations

import pytest

from fleetplan.catalogs import CatalogError, load_catalog

REQUIRED_GPUS = {"a100-sxm-80gb", "h100-sxm", "h100-pcie", "h200-sxm", "b200", "gb200", "l40s", "l4", "mi300x", "mi325x"}
REQUIRED_MODELS = {
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.3-70b", "qwen3-32b", "qwen3-235b-a22b",
    "mixtral-8x7b", "gpt-oss-120b", "deepseek-v3", "deepseek-r1",
}


def test_required_entries_present(catalog):
    assert REQUIRED_GPUS <= set(catalog.gpus)
    assert REQUIRED_MODELS <= set(catalog.models)


def test_every_gpu_has_a_reference_price_and_sources(catalog):
    for gpu_id, gpu in catalog.gpus.items():
        assert gpu_id in catalog.reference, gpu_id
        assert gpu.source and gpu.as_of
    for p in catalog.prices:
        assert p.source and p.as_of and p.gpu in catalog.gpus


def test_dense_not_sparse_flops(catalog):
    h100 = catalog.gpus["h100-sxm"]
    assert h100.dense_flops_per_s["bf16"] == pytest.approx(989.4e12, rel=1e-3)
    assert h100.dense_flops_per_s["fp8"] == pytest.approx(1978.9e12, rel=1e-3)
    assert "fp4" not in h100.dense_flops_per_s
    assert catalog.gpus["b200"].dense_flops_per_s["fp4"] == pytest.approx(9e15, rel=1e-3)
    for g in catalog.gpus.values():  # every rate is below 20 PFLOP/s dense: no sparse headline slipped in
        assert max(g.dense_flops_per_s.values()) < 20e15
        assert g.memory_bytes < 400e9 and g.mem_bandwidth_bytes_per_s < 20e12


def test_params_consistent_with_architecture(catalog):
    for m in catalog.models.values():
        assert m.active_params <= m.total_params
        if m.moe is None:
            assert m.active_params == m.total_params, m.id


def test_user_file_overrides_and_adds(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "gpus:\n  - id: h100-sxm\n    memory_bytes: 94.0e+9\n"
        "reference:\n  - gpu: h100-sxm\n    usd_per_gpu_hour: 1.99\n    source: my contract\n    as_of: 2026-11-01\n"
    )
    cat = load_catalog([f])
    assert cat.gpus["h100-sxm"].memory_bytes == 94e9
    assert cat.gpus["h100-sxm"].mem_bandwidth_bytes_per_s == 3.35e12  # untouched fields kept
    assert cat.reference["h100-sxm"].usd_per_gpu_hour == 1.99
    assert str(f) in cat.files


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpus:\n  - id: h100-sxm\n    memory_bytes: -1\n", "gpus[h100-sxm].memory_bytes: must be a number above 0"),
        ("gpus:\n  - id: h100-sxm\n    memory_gb: 80\n", "gpus[h100-sxm].memory_gb: unknown field"),
        ("gpus:\n  - id: h100-sxm\n    scaleup_domain_gpus: eight\n", "gpus[h100-sxm].scaleup_domain_gpus"),
        ("models:\n  - id: new-model\n    name: x\n", "models[new-model]"),
        ("gpu:\n  - id: x\n", "unknown section 'gpu' (nearest valid choice: gpus)"),
        ("gpus: [\n", "malformed YAML"),
        ("prices:\n  - gpu: h100-sx\n    provider: me\n    kind: spot\n    usd_per_gpu_hour: 1\n    source: s\n    as_of: 2026-01-01\n",
         "unknown GPU id 'h100-sx' (nearest valid choice: h100-sxm)"),
    ],
)
def test_bad_catalog_files_name_file_entry_field(tmp_path, text, expected):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(CatalogError) as info:
        load_catalog([f])
    msg = str(info.value)
    assert expected in msg
    assert str(f) in msg
    assert "\n" not in msg
