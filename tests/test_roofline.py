"""The roofline against the seed document's worked example and hand-computed values."""

from __future__ import annotations

import pytest

from fleetplan.models.memory import kv_bytes_per_sequence, kv_bytes_per_token, kv_replication_factor, weight_bytes
from fleetplan.models.parallel import tp_problem
from fleetplan.models.prefill import prefill_flops_per_request
from fleetplan.models.presets import DEFAULT, SEED
from fleetplan.models.roofline import decode_step


def seed_example(catalog, preset=SEED, **kw):
    args = dict(precision="fp8", tp=2, batch=64, input_tokens=2000, output_tokens=400, preset=preset)
    args.update(kw)
    return decode_step(catalog.models["llama-3.1-70b"], catalog.gpus["h100-sxm"], **args)


def test_seed_worked_example_matches_the_document(catalog):
    e = seed_example(catalog)
    # weights 70.55e9 B (FP8, 1 B/param); KV/seq = 2400 tokens x 327,680 B = 0.786 GB
    assert e.weight_bytes == pytest.approx(70.55e9)
    assert e.kv_bytes_read_per_sequence == pytest.approx(2400 * 327_680)
    assert e.bytes_per_step / 1e9 == pytest.approx(120.88, abs=0.01)  # document: ~121 GB
    # 120.88e9 / (2 x 3.35e12 x 0.7) = 25.77 ms (document: 25.8 ms)
    assert e.memory_time_s * 1e3 == pytest.approx(25.774, abs=0.005)
    # 2 x 70.55e9 x 64 / (2 x 989.4e12 x 0.5) = 9.13 ms (document: ~9 ms)
    assert e.compute_time_s * 1e3 == pytest.approx(9.127, abs=0.005)
    assert e.bound == "memory"
    assert e.per_user_tokens_per_s == pytest.approx(38.80, abs=0.01)  # document: ~39
    assert e.replica_tokens_per_s == pytest.approx(2483.1, abs=0.5)  # document: ~2,480
    assert e.memory_needed_bytes / 1e9 == pytest.approx(120.88, abs=0.01)  # document: 121 of 144 GB
    assert e.memory_usable_bytes == pytest.approx(144e9)
    assert e.fits


def test_seed_fleet_arithmetic(catalog):
    e = seed_example(catalog)
    usable = e.replica_tokens_per_s * 0.7
    assert usable == pytest.approx(1738.2, abs=0.2)  # document: ~1,740
    replicas = -(-140_000 // usable)
    assert replicas == 81
    assert replicas * 2 * 730 * 2.50 == pytest.approx(295_650)


def test_default_preset_differs_as_documented(catalog):
    s, d = seed_example(catalog), seed_example(catalog, preset=DEFAULT)
    # average decode context 2000 + 400/2 = 2200 tokens read, 2400 held
    assert d.kv_bytes_read_per_sequence == pytest.approx(2200 * 327_680)
    assert d.kv_bytes_held_per_sequence == pytest.approx(2400 * 327_680)
    # compute at the fitted decode efficiency 0.627 (the seed's 0.5) and the FP8 dense rate (twice the
    # seed's bf16) for all but the share 0.118 of the work that runs at the bf16 rate
    assert d.compute_time_s == pytest.approx(
        s.compute_time_s * (0.118 + 0.882 * 989.4 / 1978.9) * 0.5 / 0.627, rel=1e-9)
    assert d.compute_precision == "fp8"
    # the default reads fewer bytes for the same FLOPs; its step also pays
    # communication and fixed overheads (tests/test_fidelity_terms.py checks those terms)
    assert d.bytes_per_step < s.bytes_per_step and d.flops_per_step == s.flops_per_step
    assert d.step_time_s == pytest.approx(
        max(d.weights_time_s, d.compute_time_s) + d.kv_time_s + d.prefill_time_s + d.comm_time_s + d.overhead_time_s
    )
    # the default preset honours an FP8 KV cache, the seed keeps bf16
    d8 = seed_example(catalog, preset=DEFAULT, kv_precision="fp8")
    s8 = seed_example(catalog, kv_precision="fp8")
    assert d8.kv_bytes_held_per_sequence == pytest.approx(2400 * 163_840)
    assert s8.kv_bytes_held_per_sequence == pytest.approx(2400 * 327_680)


@pytest.mark.parametrize(
    ("model", "bf16_bytes"),
    [
        ("llama-3.1-8b", 131_072),
        ("llama-3.1-70b", 327_680),
        ("llama-3.1-405b", 516_096),
        ("qwen3-32b", 262_144),
        ("qwen3-235b-a22b", 192_512),
        ("mixtral-8x7b", 131_072),
        ("gpt-oss-120b", 73_728),
        ("deepseek-v3", 70_272),  # MLA: 61 x (512 + 64) x 2 B
    ],
)
def test_kv_bytes_per_token_hand_values(catalog, model, bf16_bytes):
    llm = catalog.models[model]
    assert kv_bytes_per_token(llm, "bf16") == bf16_bytes
    assert kv_bytes_per_token(llm, "fp8") == bf16_bytes / 2


def test_sliding_window_caps_local_layers(catalog):
    llm = catalog.models["gpt-oss-120b"]  # 18 global layers, 18 local layers with a 128-token window
    per_layer = 2 * 8 * 64 * 2
    assert kv_bytes_per_sequence(llm, "bf16", 10_000, sliding_window=True) == per_layer * (18 * 10_000 + 18 * 128)
    assert kv_bytes_per_sequence(llm, "bf16", 10_000, sliding_window=False) == per_layer * 36 * 10_000


def test_weight_bytes_per_precision(catalog):
    llm = catalog.models["llama-3.1-70b"]
    assert weight_bytes(llm, "bf16") == pytest.approx(141.1e9)
    assert weight_bytes(llm, "fp8") == pytest.approx(70.55e9)
    assert weight_bytes(llm, "fp4") == pytest.approx(35.275e9)


def test_kv_replication_beyond_kv_heads(catalog):
    assert kv_replication_factor(catalog.models["qwen3-235b-a22b"], 8) == 2.0  # 4 KV heads at TP 8
    assert kv_replication_factor(catalog.models["llama-3.1-70b"], 8) == 1.0
    assert kv_replication_factor(catalog.models["deepseek-v3"], 8) == 8.0  # MLA latent on every rank


def test_tp_validity(catalog):
    llm, h100, l40s = catalog.models["llama-3.1-70b"], catalog.gpus["h100-sxm"], catalog.gpus["l40s"]
    assert tp_problem(llm, h100, 8) is None
    assert "scale-up domain" in tp_problem(llm, l40s, 2)
    assert "scale-up domain" in tp_problem(llm, h100, 16)
    assert "attention heads" in tp_problem(catalog.models["qwen3-32b"], catalog.gpus["gb200"], 3)


def test_prefill_flops_seed_numbers(catalog):
    llm = catalog.models["llama-3.1-70b"]
    # document: 700K input tokens/s x 2 x 70.6B ~ 99 PFLOP/s
    per_request = prefill_flops_per_request(llm, 2000)
    assert per_request == pytest.approx(2 * 70.55e9 * 2000)
    assert per_request * 350 / 1e15 == pytest.approx(98.77, abs=0.01)
    assert prefill_flops_per_request(llm, 2000, 0.5) == pytest.approx(per_request / 2)


def test_step_time_monotone_in_batch(catalog):
    """Candidate generation relies on this: everything gets worse with batch, throughput better."""
    prev = None
    for b in range(1, 300, 7):
        e = seed_example(catalog, preset=DEFAULT, batch=b)
        if prev is not None:
            assert e.step_time_s >= prev.step_time_s
            assert e.memory_needed_bytes >= prev.memory_needed_bytes
            assert e.replica_tokens_per_s >= prev.replica_tokens_per_s
        prev = e
