"""Each term the default preset adds to the roofline, against hand-computed values."""

from __future__ import annotations

import dataclasses

import pytest

from fleetplan.models.communication import allreduce_time_s, alltoall_time_s, parallel_comm_time_s
from fleetplan.models.interference import (
    prefill_busy_share, prefill_flops_per_step, prefill_tokens_per_step, share_before_first_token,
)
from fleetplan.models.memory import kv_bytes_per_sequence, paged_tokens
from fleetplan.models.moe import ep_problem, expected_distinct_experts, params_per_expert, params_read_per_step
from fleetplan.models.overhead import host_time_s, layer_time_s
from fleetplan.models.physics import DEFAULT_PHYSICS
from fleetplan.models.prefill import prefill_attention_flops
from fleetplan.models.presets import DEFAULT, SEED, CalibrationFactors, normalize_engine
from fleetplan.models.roofline import decode_step, kv_page_factor, mixed_precision_rate, usable_flop_rate


def step(catalog, model="llama-3.1-70b", gpu="h100-sxm", preset=DEFAULT, **kw):
    args = dict(precision="fp8", tp=2, batch=64, input_tokens=2000, output_tokens=400, preset=preset)
    args.update(kw)
    return decode_step(catalog.models[model], catalog.gpus[gpu], **args)


# ---------------------------------------------------------------- communication
def test_ring_allreduce_hand_value():
    # 8 us + 2 x 3 ring steps x 2.5 us + 6/4 x 1 MB / (450 GB/s x 0.7)
    t = allreduce_time_s(1e6, 4, 450e9, 8e-6, 2.5e-6, 0.7)
    assert t == pytest.approx(8e-6 + 15e-6 + 1.5 * 1e6 / 315e9)
    assert allreduce_time_s(1e6, 1, 450e9, 8e-6, 2.5e-6, 0.7) == 0.0


def test_alltoall_hand_value():
    t = alltoall_time_s(8e6, 8, 450e9, 8e-6, 2.5e-6, 0.7)
    assert t == pytest.approx(8e-6 + 7 * 2.5e-6 + 7 / 8 * 8e6 / 315e9)


def test_tp_comm_per_step_llama70b(catalog):
    llm, gpu = catalog.models["llama-3.1-70b"], catalog.gpus["h100-sxm"]
    # 2 all-reduces x 80 layers of 64 tokens x 8192 x 2 B = 1,048,576 B over 2 GPUs: one-shot
    # latency 2.45 us (no per-hop cost on NVLink) + 2 x 1/2 x bytes / (450 GB/s x 0.398)
    per = 2.45e-6 + 1.0 * 1_048_576 / (450e9 * 0.398)
    assert parallel_comm_time_s(llm, gpu, DEFAULT_PHYSICS, tp=2, ep=1, tokens=64) == pytest.approx(160 * per)
    assert parallel_comm_time_s(llm, gpu, DEFAULT_PHYSICS, tp=1, ep=1, tokens=64) == 0.0
    assert step(catalog).comm_time_s == pytest.approx(160 * per)
    # a small all-reduce costs about the same at TP 8 as at TP 2: no 2(tp - 1) hops
    small2 = parallel_comm_time_s(llm, gpu, DEFAULT_PHYSICS, tp=2, ep=1, tokens=1)
    small8 = parallel_comm_time_s(llm, gpu, DEFAULT_PHYSICS, tp=8, ep=1, tokens=1)
    assert small8 < 1.1 * small2


def test_expert_parallel_comm_replaces_moe_allreduce(catalog):
    llm, gpu = catalog.models["deepseek-v3"], catalog.gpus["h200-sxm"]
    tokens = 32
    ar = allreduce_time_s(tokens * 7168 * 2, 8, 450e9, 2.45e-6, 0.0, 0.398)
    a2a = alltoall_time_s(tokens / 8 * 8 * 7168 * 2, 8, 450e9, 2.45e-6, 0.0, 0.398)
    expected = 61 * ar + 3 * ar + 58 * 2 * a2a  # attention every layer, MLP of 3 dense layers, MoE a2a
    assert parallel_comm_time_s(llm, gpu, DEFAULT_PHYSICS, tp=8, ep=8, tokens=tokens) == pytest.approx(expected)
    assert parallel_comm_time_s(llm, gpu, DEFAULT_PHYSICS, tp=8, ep=1, tokens=tokens) == pytest.approx(122 * ar)


# ---------------------------------------------------------------- MoE
def test_expected_distinct_experts():
    assert expected_distinct_experts(8, 2, 1) == pytest.approx(2.0)
    assert expected_distinct_experts(256, 8, 1) == pytest.approx(8.0)
    # two tokens: 8 x (1 - (6/8)^2) = 3.5
    assert expected_distinct_experts(8, 2, 2) == pytest.approx(3.5)
    assert expected_distinct_experts(256, 8, 10_000) == pytest.approx(256.0)
    values = [expected_distinct_experts(128, 4, b) for b in range(300)]
    assert values == sorted(values)


def test_moe_params_read(catalog):
    mixtral = catalog.models["mixtral-8x7b"]
    per_expert = 3 * 4096 * 14336
    assert params_per_expert(mixtral) == per_expert
    dense = mixtral.total_params - 32 * 8 * per_expert
    # one token reads the dense part and 2 experts per layer: the active parameters
    assert params_read_per_step(mixtral, 1) == pytest.approx(dense + 32 * 2 * per_expert)
    assert params_read_per_step(mixtral, 1) == pytest.approx(mixtral.active_params, rel=0.01)
    assert params_read_per_step(mixtral, 512) == pytest.approx(mixtral.total_params)
    dense_model = catalog.models["llama-3.1-70b"]
    assert params_read_per_step(dense_model, 1) == dense_model.total_params


def test_moe_step_reads_touched_experts_and_computes_active(catalog):
    d = step(catalog, model="deepseek-v3", gpu="h200-sxm", tp=8, batch=4, input_tokens=1000, output_tokens=1000)
    s = step(catalog, model="deepseek-v3", gpu="h200-sxm", tp=8, batch=4, input_tokens=1000, output_tokens=1000, preset=SEED)
    assert s.weight_bytes_read == pytest.approx(671e9)  # the seed reads every expert
    assert d.weight_bytes_read < 0.15 * s.weight_bytes_read
    assert d.weight_bytes == s.weight_bytes  # memory still holds every expert
    assert d.flops_per_step == pytest.approx(2 * 37e9 * 4)


def test_ep_problem(catalog):
    ds, llama = catalog.models["deepseek-v3"], catalog.models["llama-3.1-70b"]
    assert ep_problem(ds, 8, 8) is None and ep_problem(ds, 8, 1) is None
    assert "divide" in ep_problem(ds, 4, 8)
    assert "dense" in ep_problem(llama, 8, 8)
    assert ep_problem(catalog.models["mixtral-8x7b"], 8, 8) is None  # 8 experts, one per GPU
    assert "at least" in ep_problem(ds, 8, 0)


# ---------------------------------------------------------------- overhead
def test_step_overhead_per_family(catalog):
    llm = catalog.models["llama-3.1-70b"]
    h100, mi300x = catalog.gpus["h100-sxm"], catalog.gpus["mi300x"]
    assert layer_time_s(llm, h100, DEFAULT_PHYSICS) == pytest.approx(80 * 59.4e-6)
    # AMD's fixed costs are NVIDIA's (per-family ones stood in for engine and model); its own
    # bandwidth efficiency (MI300X 0.586, MI355X 0.90) and xGMI collective latency
    assert layer_time_s(llm, mi300x, DEFAULT_PHYSICS) == pytest.approx(80 * 59.4e-6)
    assert DEFAULT_PHYSICS.family("cdna3").bandwidth_efficiency == 0.586
    assert DEFAULT_PHYSICS.family("cdna3").collective_latency_s > DEFAULT_PHYSICS.family("hopper").collective_latency_s
    # host work: a fixed part per family (fitted to zero) and 12.5 us per sequence
    assert host_time_s(h100, DEFAULT_PHYSICS, 64) == pytest.approx(64 * 12.5e-6)
    assert host_time_s(mi300x, DEFAULT_PHYSICS, 64) == pytest.approx(64 * 12.5e-6)
    assert DEFAULT_PHYSICS.family("unknown-family") is DEFAULT_PHYSICS.fallback
    assert step(catalog).overhead_time_s == pytest.approx(80 * 59.4e-6 + 64 * 12.5e-6)
    # the host's share does not shrink with tensor parallelism
    assert step(catalog, tp=8).overhead_time_s == pytest.approx(step(catalog).overhead_time_s)


# ---------------------------------------------------------------- KV cache
def test_paged_kv_rounds_to_blocks(catalog):
    llm = catalog.models["llama-3.1-70b"]
    assert paged_tokens(2400, 16) == 2400
    assert paged_tokens(2401, 16) == 2416
    assert paged_tokens(2401, 1) == 2401
    assert kv_bytes_per_sequence(llm, "bf16", 2401, False, 16) == 2416 * 327_680
    # gpt-oss: 128-token windows on half the layers, also paged
    oss = catalog.models["gpt-oss-120b"]
    per_layer = 2 * 8 * 64 * 2
    assert kv_bytes_per_sequence(oss, "bf16", 1000, True, 16) == per_layer * (18 * 1008 + 18 * 128)


def test_kv_pages_round_each_read_up_and_cost_a_fixed_overhead():
    c = DEFAULT_PHYSICS.kv_page_overhead
    assert c > 0
    # SGLang's one-token pages: no rounding, c per token
    assert kv_page_factor(DEFAULT, "sglang", 2401) == pytest.approx(1 + c)
    # vLLM's 16-token blocks: 2401 tokens are 151 blocks (2416 tokens) of 16 + c each
    assert kv_page_factor(DEFAULT, "vllm", 2401) == pytest.approx(151 * (16 + c) / 2401)
    # TensorRT-LLM's 32-token blocks: 2400 tokens are exactly 75
    assert kv_page_factor(DEFAULT, "TensorRT-LLM", 2400) == pytest.approx(75 * (32 + c) / 2400)
    assert kv_page_factor(DEFAULT, "atom", 2401) == kv_page_factor(DEFAULT, "vllm", 2401)
    # an unknown engine and the planner (no engine) take vLLM's 16 tokens
    assert kv_page_factor(DEFAULT, "some-new-engine", 2401) == kv_page_factor(DEFAULT, "vllm", 2401)
    assert kv_page_factor(DEFAULT, None, 2401) == kv_page_factor(DEFAULT, "vllm", 2401)
    assert kv_page_factor(SEED, "sglang", 2401) == 1.0


def test_decode_step_reads_the_kv_cache_in_the_engines_pages(catalog):
    # Llama-3.1-70B, 2 H100s, 64 sequences of 2,000 + 400 tokens: each step reads 2,000 + 200 tokens
    # of BF16 KV (327,680 B per token) per sequence
    c = DEFAULT_PHYSICS.kv_page_overhead
    bandwidth = 2 * 3.35e12 * DEFAULT_PHYSICS.family("hopper").bandwidth_efficiency * DEFAULT_PHYSICS.kv_bandwidth_efficiency
    plain = 64 * 2200 * 327_680 / bandwidth
    assert step(catalog, engine="sglang").kv_time_s == pytest.approx(plain * (1 + c))
    assert step(catalog, engine="vllm").kv_time_s == pytest.approx(plain * 138 * (16 + c) / 2200)
    assert step(catalog, engine="trtllm").kv_time_s == pytest.approx(plain * 69 * (32 + c) / 2200)
    # the rest of the step does not depend on the pages
    a, b = step(catalog, engine="sglang"), step(catalog, engine="trtllm")
    assert a.step_time_s - a.kv_time_s == pytest.approx(b.step_time_s - b.kv_time_s)


def test_mla_latent_and_fp8_kv(catalog):
    d = step(catalog, model="deepseek-v3", gpu="h200-sxm", tp=8, batch=8, input_tokens=1000, output_tokens=0,
             kv_precision="fp8")
    # 61 layers x (512 + 64) x 1 B per token, one latent copy per TP rank
    assert d.kv_bytes_read_per_sequence == pytest.approx(1000 * 61 * 576 * 8)


def test_sequence_cap_makes_large_batches_infeasible(catalog):
    small = dict(model="llama-3.1-8b", gpu="b200", tp=8, input_tokens=10, output_tokens=10, precision="fp8")
    assert step(catalog, batch=1024, **small).fits
    over = step(catalog, batch=1025, **small)
    assert over.batch_cap == DEFAULT_PHYSICS.max_num_seqs and not over.fits
    assert over.memory_needed_bytes < over.memory_usable_bytes
    assert step(catalog, batch=1025, preset=SEED, **small).fits  # the seed has no cap


# ---------------------------------------------------------------- prefill interference
def test_prefill_interference_hand_values(catalog):
    llm = catalog.models["llama-3.1-70b"]
    assert prefill_tokens_per_step(64, 2000, 400) == pytest.approx(320)
    per_request = 2 * 70.55e9 * 2000 + prefill_attention_flops(llm, 2000)
    assert prefill_flops_per_step(llm, 64, 2000, 400) == pytest.approx(64 / 400 * per_request)
    assert prefill_flops_per_step(llm, 64, 2000, 400, 0.5) == pytest.approx(32 / 400 * per_request)
    plain, agg = step(catalog), step(catalog, aggregated=True)
    # prefill at the prefill efficiency, FP8 for all but the share 0.118 of the work run at bf16
    rate = 2 * 989.4e12 / (0.118 + 0.882 * 989.4 / 1978.9) * 0.783
    # a closed-loop benchmark: the other 63 requests' prompts, less the share the engine prefills
    # before a request's first token (0.0905 for an unnamed engine, 0.137 for SGLang, 0.623 for
    # SGLang 0.5.1), that share lowered as (1 - rho)^0.336 with the share rho of the cycle spent
    # prefilling 64 prompts against 400 steps
    assert DEFAULT_PHYSICS.busy_share_exponent == 0.336
    rho = 64 * per_request / rate / (64 * per_request / rate + 400 * plain.step_time_s)
    assert agg.prefill_busy_share == pytest.approx(rho) and 0.3 < rho < 0.4
    carried = 1 - 0.0905 * (1 - rho) ** 0.336
    assert agg.prefill_time_s == pytest.approx(carried * 63 / 400 * per_request / rate)
    for engine, version, share in (("sglang", "", 0.137), ("sglang", "0.5.1.post1", 0.623), ("sglang", "0.5.10", 0.137),
                                   ("vllm", "0.5.1", 0.107)):
        got = step(catalog, aggregated=True, engine=engine, engine_version=version)
        # the busy share is the engine's own: its plain step reads the KV cache in its pages
        own = step(catalog, engine=engine).step_time_s
        rho_e = 64 * per_request / rate / (64 * per_request / rate + 400 * own)
        assert got.prefill_time_s == pytest.approx((1 - share * (1 - rho_e) ** 0.336) * 63 / 400 * per_request / rate)
    # at exponent 0 the share is the engine's whatever the busy share (which is then not computed)
    flat = dataclasses.replace(DEFAULT, physics=dataclasses.replace(DEFAULT_PHYSICS, busy_share_exponent=0.0))
    shared = step(catalog, aggregated=True, preset=flat)
    assert shared.prefill_busy_share == 0.0
    assert shared.prefill_time_s == pytest.approx((1 - 0.0905) * 63 / 400 * per_request / rate)
    # the prefilled tokens' activations are all-reduced with the batch's
    tokens = carried * 63 / 400 * per_request / (2 * 70.55e9)
    gpu = catalog.gpus["h100-sxm"]
    assert agg.comm_time_s == pytest.approx(parallel_comm_time_s(llm, gpu, DEFAULT_PHYSICS, tp=2, ep=1, tokens=64 + tokens))
    assert agg.comm_time_s > plain.comm_time_s
    assert agg.step_time_s == pytest.approx(plain.step_time_s + agg.prefill_time_s + agg.comm_time_s - plain.comm_time_s)
    # explicit prefill work from the caller is added time in the default composition
    extra = step(catalog, prefill_flops_per_step=1e13)
    assert extra.step_time_s == pytest.approx(plain.step_time_s + 1e13 / rate + extra.comm_time_s - plain.comm_time_s)


def test_busy_share_lowers_the_share_ahead():
    # 64 prompts of 50 ms against 400 steps of 20 ms: prefill is 3.2 s of a 11.2 s cycle
    assert prefill_busy_share(64, 0.05, 400, 0.02) == pytest.approx(3.2 / 11.2)
    assert prefill_busy_share(0, 0.05, 400, 0.02) == 0.0
    assert prefill_busy_share(4, 0.0, 1, 0.0) == 0.0
    # the engine's share as it is at no prefill, none of it when prefill is the whole cycle
    assert share_before_first_token(0.45, 0.0, 0.46) == pytest.approx(0.45)
    assert share_before_first_token(0.45, 0.5, 0.46) == pytest.approx(0.45 * 0.5**0.46)
    assert share_before_first_token(0.45, 1.0, 0.46) == 0.0
    assert share_before_first_token(0.45, 0.5, 0.0) == 0.45  # exponent 0: the engine's share
    assert DEFAULT_PHYSICS.busy_share_exponent == 0.336


# ---------------------------------------------------------------- the seed is untouched
def test_seed_ignores_every_new_term(catalog):
    base = step(catalog, preset=SEED)
    same = step(catalog, preset=SEED, ep=1, engine="vllm", aggregated=True)
    assert same.step_time_s == base.step_time_s == pytest.approx(25.774e-3, abs=5e-6)
    assert base.comm_time_s == base.overhead_time_s == base.prefill_time_s == 0.0
    assert base.batch_cap is None


# ---------------------------------------------------------------- monotone in batch
@pytest.mark.parametrize(
    ("model", "gpu", "tp", "precision", "aggregated"),
    [
        ("llama-3.1-70b", "h100-sxm", 2, "fp8", False),
        ("llama-3.1-70b", "h100-sxm", 8, "fp8", True),
        ("deepseek-v3", "h200-sxm", 8, "fp8", True),
        ("gpt-oss-120b", "b200", 1, "fp4", True),
        ("qwen3-235b-a22b", "mi300x", 8, "fp8", False),
    ],
)
def test_default_monotone_in_batch(catalog, model, gpu, tp, precision, aggregated):
    factors = (CalibrationFactors(bandwidth_scale=0.9, overhead_scale=1.3, comm_scale=1.2, compute_scale=0.8),)
    for preset in (DEFAULT, dataclasses.replace(DEFAULT, factors=factors, calibration="x")):
        prev = None
        for b in [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1024, 1025, 1500]:
            e = step(catalog, model=model, gpu=gpu, tp=tp, precision=precision, batch=b, preset=preset,
                     aggregated=aggregated, input_tokens=1000, output_tokens=500)
            if prev is not None:
                assert e.step_time_s >= prev.step_time_s
                assert e.memory_needed_bytes >= prev.memory_needed_bytes
                assert e.replica_tokens_per_s >= prev.replica_tokens_per_s * (1 - 1e-12)
                assert not (e.fits and not prev.fits)
            prev = e


# ---------------------------------------------------------------- calibration lookup
def test_factors_for_picks_the_most_specific_entry():
    entries = (
        CalibrationFactors(bandwidth_scale=1.0),
        CalibrationFactors(engine="vllm", bandwidth_scale=1.1),
        CalibrationFactors(gpu="hopper", bandwidth_scale=1.2),
        CalibrationFactors(gpu="hopper", engine="vllm", bandwidth_scale=1.3),
        CalibrationFactors(gpu="h100-sxm", bandwidth_scale=1.4),
        CalibrationFactors(gpu="h100-sxm", engine="vllm", bandwidth_scale=1.5),
    )
    p = dataclasses.replace(DEFAULT, factors=entries)
    assert p.factors_for("h100-sxm", "hopper", "vLLM 0.11").bandwidth_scale == 1.5
    assert p.factors_for("h100-sxm", "hopper", None).bandwidth_scale == 1.4
    assert p.factors_for("h200-sxm", "hopper", "vllm").bandwidth_scale == 1.3
    assert p.factors_for("h200-sxm", "hopper", "sglang").bandwidth_scale == 1.2
    assert p.factors_for("mi300x", "cdna3", "vllm").bandwidth_scale == 1.1
    assert p.factors_for("mi300x", "cdna3", None).bandwidth_scale == 1.0
    assert DEFAULT.factors_for("h100-sxm", "hopper", "vllm") == CalibrationFactors()


def test_calibration_factors_scale_the_terms(catalog):
    base = step(catalog)
    f = CalibrationFactors(gpu="hopper", bandwidth_scale=0.5, overhead_scale=2.0, comm_scale=3.0)
    cal = step(catalog, preset=dataclasses.replace(DEFAULT, factors=(f,)))
    assert cal.weights_time_s == pytest.approx(2 * base.weights_time_s)
    assert cal.kv_time_s == pytest.approx(2 * base.kv_time_s)
    assert cal.overhead_time_s == pytest.approx(2 * base.overhead_time_s)
    assert cal.comm_time_s == pytest.approx(3 * base.comm_time_s)


@pytest.mark.parametrize(
    ("text", "name"),
    [("TensorRT-LLM v0.9.0", "trtllm"), ("NVIDIA NIM (TensorRT-LLM backend)", "trtllm"), ("trtllm", "trtllm"),
     ("vLLM v0.11.0", "vllm"), ("SGLang v0.5.3", "sglang"), ("TGI (sha-11d7af7-rocm)", "tgi"), ("LMDeploy 0.6", "lmdeploy"),
     ("", None), (None, None)],
)
def test_normalize_engine(text, name):
    assert normalize_engine(text) == name


def test_weight_only_fp4_pays_a_fixed_time_per_layer(catalog):
    """gpt-oss-120b's MXFP4 weights on an H100 (no FP4 tensor cores) are unpacked to bf16: 38.6 us
    per layer per step, 36 layers; on a B200 (an FP4 rate) and at FP8 nothing."""
    from fleetplan.models.overhead import dequant_time_s

    llm = catalog.models["gpt-oss-120b"]
    h100, b200 = catalog.gpus["h100-sxm"], catalog.gpus["b200"]
    assert llm.num_layers == 36 and DEFAULT_PHYSICS.weight_only_fp4_layer_s == pytest.approx(38.6e-6)
    assert dequant_time_s(llm, h100, DEFAULT_PHYSICS, "fp4") == pytest.approx(36 * 38.6e-6)
    assert dequant_time_s(llm, b200, DEFAULT_PHYSICS, "fp4") == 0.0
    assert dequant_time_s(llm, h100, DEFAULT_PHYSICS, "fp8") == 0.0
    kw = dict(model="gpt-oss-120b", tp=2, batch=8, input_tokens=1024, output_tokens=1024)
    fp4, fp8 = step(catalog, precision="fp4", **kw), step(catalog, precision="fp8", **kw)
    assert fp4.overhead_time_s - fp8.overhead_time_s == pytest.approx(36 * 38.6e-6)
    assert step(catalog, precision="fp4", preset=SEED, **kw).overhead_time_s == 0.0


def test_fp4_checkpoints_hold_their_block_scales_on_the_quantised_experts_only(catalog):
    """gpt-oss-120b: 36 layers x 128 experts x 3 x 2,880^2 = 114.66e9 expert weights in MXFP4 (4.25
    bits: 32-element blocks with an 8-bit scale) = 60.91 GB, the other 2.17e9 in BF16 = 4.28 GB:
    65.19 GB, the model card's 60.8 GiB (65.3 GB), not 116.8e9 x 0.5 = 58.4 GB. DeepSeek-R1 NVFP4 on
    NVIDIA (4.5 bits: 16-element blocks with an FP8 scale), MXFP4 on AMD; FP8 and BF16 unchanged."""
    from fleetplan.models.memory import held_weight_bytes, weight_bytes

    cat = catalog
    oss, r1 = cat.models["gpt-oss-120b"], cat.models["deepseek-r1"]
    experts = 36 * 128 * 3 * 2880**2
    assert held_weight_bytes(oss, "fp4") == pytest.approx(experts * 4.25 / 8 + (116.8e9 - experts) * 2)
    assert held_weight_bytes(oss, "fp4") / 1e9 == pytest.approx(65.19, abs=0.01)
    r1_experts = 58 * 256 * 3 * 7168 * 2048
    assert held_weight_bytes(r1, "fp4", "nvidia") == pytest.approx(r1_experts * 4.5 / 8 + (671e9 - r1_experts) * 2)
    assert held_weight_bytes(r1, "fp4", "amd") == pytest.approx(r1_experts * 4.25 / 8 + (671e9 - r1_experts) * 2)
    assert held_weight_bytes(r1, "fp8") == weight_bytes(r1, "fp8") == 671e9


def test_b200_engines_allocate_from_its_192_gb(catalog):
    """The catalog's 180 GB is NVIDIA's stated figure; engines allocate from the 192 GB it holds, so
    DeepSeek-R1 FP8 (671 GB) on 4 B200 fits with one 9,216-token sequence, as it was measured running."""
    from fleetplan.models.roofline import decode_step, kv_page_factor

    cat = catalog
    e = decode_step(cat.models["deepseek-r1"], cat.gpus["b200"], precision="fp8", tp=4, batch=1,
                    input_tokens=8192, output_tokens=1024, preset=DEFAULT)
    assert e.memory_usable_bytes == pytest.approx(4 * 192e9 * 0.9)
    assert e.fits and e.memory_needed_bytes == pytest.approx(671e9 + 9216 * 70272 * 4)


# ---------------------------------------------------------------- expert parallelism, FP4 unpacking
def test_busiest_expert_share_hand_value():
    """8 experts, top-2, one token, EP 2: each expert is touched with q = 1 - (6/8) = 0.25, a GPU's 4
    experts are Binomial(4, 0.25) (CDF 0.3164, 0.7383, 0.9492, 0.9961), the busier of two holds
    E[max] = sum (1 - F(m)^2) = 1.4617 touched experts against the mean 4 x 0.25 = 1."""
    from fleetplan.models.moe import busiest_expert_share

    cdf = [0.75**4, 0.75**4 + 4 * 0.25 * 0.75**3, 1 - 4 * 0.25**3 * 0.75 - 0.25**4, 1 - 0.25**4]
    expected = sum(1 - f**2 for f in cdf)
    assert expected == pytest.approx(1.4617, abs=1e-4)
    assert busiest_expert_share(8, 2, 1.0, 2) == pytest.approx(expected)
    assert busiest_expert_share(8, 2, 1.0, 1) == 1.0 and busiest_expert_share(8, 2, 0.0, 2) == 1.0
    # gpt-oss-120b (128 experts, top-4) at EP 8: the busiest GPU's share falls to 1 as the batch grows
    shares = [busiest_expert_share(128, 4, float(t), 8) for t in (1, 4, 8, 32, 128, 1024)]
    assert shares == sorted(shares, reverse=True) and shares[0] > 3.0 and shares[-1] == pytest.approx(1.0)


def test_expert_parallel_step_reads_the_busiest_gpus_experts(catalog):
    """gpt-oss-120b FP8 on 8 H200 at batch 8, EP 8: the dense weights (2.138e9) are read as with TP,
    the touched experts' time (small-group cost included) at the busiest GPU's share."""
    from fleetplan.models.moe import busiest_expert_share, grouped_params_read_per_step
    from fleetplan.models.roofline import weight_bytes_read

    llm, gpu = catalog.models["gpt-oss-120b"], catalog.gpus["h200-sxm"]
    assert DEFAULT_PHYSICS.expert_parallel_busiest
    dense = 2.1382144e9
    grouped = grouped_params_read_per_step(llm, 8, DEFAULT_PHYSICS.moe_small_group_tokens)
    share = busiest_expert_share(128, 4, 8.0, 8)
    read1, timed1 = weight_bytes_read(llm, gpu, DEFAULT, "fp8", 8, ep=1)
    read8, timed8 = weight_bytes_read(llm, gpu, DEFAULT, "fp8", 8, ep=8)
    assert timed1 == pytest.approx(grouped) and read8 == read1  # FP8: one byte per weight; bytes unchanged
    assert timed8 == pytest.approx(dense + (grouped - dense) * share)
    assert share == pytest.approx(1.687, abs=1e-3)
    no_ep_rule = dataclasses.replace(DEFAULT, physics=dataclasses.replace(DEFAULT_PHYSICS, expert_parallel_busiest=False))
    assert weight_bytes_read(llm, gpu, no_ep_rule, "fp8", 8, ep=8)[1] == pytest.approx(timed1)


# ---------------------------------------------------------------- work at the bf16 rate
def with_share(share: float):
    return dataclasses.replace(DEFAULT, physics=dataclasses.replace(DEFAULT_PHYSICS, bf16_work_share=share))


def test_low_precision_speeds_up_only_the_weight_gemms(catalog):
    """Amdahl's law on the tensor cores: a share s of the work at the bf16 rate R16, the rest at the
    precision's rate R: R16 / (s + (1 - s) x R16 / R), hand-computed per GPU and precision."""
    h100, b200 = catalog.gpus["h100-sxm"], catalog.gpus["b200"]
    one = CalibrationFactors()
    quarter = with_share(0.25)
    # H100 FP8 (R = 1,978.9, R16 = 989.4 TFLOP/s): 989.4 / (0.25 + 0.75 x 989.4 / 1,978.9) = 1,583.0
    # TFLOP/s, then the prefill efficiency
    assert usable_flop_rate(quarter, h100, "fp8", 1, one, prefill=True) == pytest.approx(
        989.4e12 / (0.25 + 0.75 * 989.4 / 1978.9) * DEFAULT.prefill_compute_efficiency, rel=1e-9)
    assert mixed_precision_rate(quarter, h100, "fp8") / 1e12 == pytest.approx(1583.0, abs=0.1)
    # B200 FP4 (R = 4 x R16) at TP 4, decode: 4 x 2,250 / (0.25 + 0.75 / 4) x the decode efficiency
    assert usable_flop_rate(quarter, b200, "fp4", 4, one, prefill=False) == pytest.approx(
        4 * 2.25e15 / 0.4375 * DEFAULT.compute_efficiency)
    # bf16 work and weight-only FP4 on Hopper (no FP4 tensor cores: computed in bf16) are unchanged
    assert usable_flop_rate(quarter, h100, "bf16", 2, one, prefill=True) == pytest.approx(
        2 * 989.4e12 * DEFAULT.prefill_compute_efficiency)
    assert mixed_precision_rate(quarter, h100, "fp4") == pytest.approx(989.4e12)
    # the two ends: none of the work at bf16 is the datasheet rate, all of it the bf16 rate
    assert mixed_precision_rate(with_share(0.0), b200, "fp4") == pytest.approx(9.0e15)
    assert mixed_precision_rate(with_share(1.0), b200, "fp4") == pytest.approx(2.25e15)
    # the seed preset computes at bf16 and has no physics: untouched
    assert mixed_precision_rate(SEED, b200, "fp4") == pytest.approx(2.25e15)


def test_bf16_share_lengthens_fp8_steps_not_bf16_ones(catalog):
    """The shipped share slows FP8 work by R / R16 x s + (1 - s) (about 1 + s) against the datasheet
    FP8 rate R, and leaves BF16 work as it was."""
    s = DEFAULT_PHYSICS.bf16_work_share
    assert 0.0 < s < 0.5
    h100 = catalog.gpus["h100-sxm"]
    fp8 = mixed_precision_rate(DEFAULT, h100, "fp8")
    assert h100.flops_per_s("fp8") / fp8 == pytest.approx(1978.9 / 989.4 * s + (1 - s))
    assert mixed_precision_rate(DEFAULT, h100, "bf16") == h100.flops_per_s("bf16")
    none = with_share(0.0)
    # a compute-bound FP8 decode step: its compute time grows by exactly that factor
    kw = dict(batch=512, input_tokens=1000, output_tokens=100)
    with_s, without = step(catalog, **kw), step(catalog, preset=none, **kw)
    assert with_s.compute_time_s / without.compute_time_s == pytest.approx(1978.9 / 989.4 * s + (1 - s))
