"""Replica layouts beyond one tensor-parallel group: pipeline stages, expert and attention-data
parallelism. Hand-computed terms, the engines' rules, and plans that need them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fleetplan.main import main
from fleetplan.models.layout import (
    LAYOUT_PHYSICS,
    Layout,
    ep_alltoall_s,
    layout_problem,
    micro_batch,
    moe_comm_time_s,
    pp_handoff_s,
    pp_imbalance,
    rank_batch,
    weights_per_gpu_bytes,
)
from fleetplan.models.memory import kv_bytes_per_sequence
from fleetplan.models.moe import routed_expert_params
from fleetplan.models.physics import DEFAULT_PHYSICS
from fleetplan.models.presets import get_preset
from fleetplan.models.roofline import decode_step
from fleetplan.optimizer.problem_data.candidates import generate_candidates
from fleetplan.optimizer.problem_data.layouts import replica_layouts
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import fits_instances
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import parse_scenario

STEP = {"input_tokens": 2000, "output_tokens": 400}


def step(catalog, model, gpu, layout, batch, precision="fp8", preset="default"):
    return decode_step(catalog.models[model], catalog.gpus[gpu], precision=precision, tp=layout.tp, batch=batch,
                       preset=get_preset(preset), layout=layout, **STEP)


@pytest.mark.parametrize("preset", ["seed", "default"])
@pytest.mark.parametrize("model", ["llama-3.1-70b", "deepseek-v3"])
def test_tensor_parallel_layout_is_todays_step_exactly(catalog, preset, model):
    for tp in (1, 2, 8):
        plain = decode_step(catalog.models[model], catalog.gpus["h200-sxm"], precision="fp8", tp=tp, batch=48,
                            preset=get_preset(preset), **STEP)
        assert step(catalog, model, "h200-sxm", Layout(tp), 48, preset=preset) == plain


def test_gpus_nodes_and_labels(catalog):
    h100, gb200 = catalog.gpus["h100-sxm"], catalog.gpus["gb200"]
    assert (Layout(8, 2).gpus, Layout(8, 2).nodes(h100), Layout(8, 2).label()) == (16, 2, "tp8·pp2")
    wide = Layout(1, 1, 16, 16)
    assert (wide.gpus, wide.nodes(h100), wide.label(), wide.nodes(gb200)) == (16, 2, "dp16·ep16", 4)
    assert Layout(2, 2, 16, 8).label() == "dp8·tp2·ep16·pp2" and Layout(2, 2, 16, 8).gpus == 32
    assert Layout(8).key_suffix() == "" and Layout(8, 2, 1, 1).key_suffix() == "/pp2"
    assert (h100.node_gpus, gb200.node_gpus, catalog.gpus["mi300x"].node_gpus) == (8, 4, 8)


def test_engine_rules(catalog):
    ds, llama, h100 = catalog.models["deepseek-v3"], catalog.models["llama-3.1-405b"], catalog.gpus["h100-sxm"]
    assert layout_problem(ds, h100, Layout(1, 1, 16, 16)) is None
    assert "does not divide deepseek-v3's 256 experts" in layout_problem(ds, h100, Layout(1, 1, 48, 48))
    assert "must divide the stage's 8 GPUs" in layout_problem(ds, h100, Layout(1, 1, 16, 8))
    assert "dense" in layout_problem(llama, h100, Layout(8, 1, 8, 1))
    assert "dense" in layout_problem(llama, h100, Layout(1, 1, 1, 8))
    assert "scale-up domain" in layout_problem(llama, h100, Layout(16, 1))
    assert "between 1 and" in layout_problem(llama, h100, Layout(8, 127))


def test_pipeline_rounding_and_batches():
    assert pp_imbalance(126, 2) == 1.0
    assert pp_imbalance(61, 2) == pytest.approx(2 * 31 / 61)
    assert pp_imbalance(61, 4) == pytest.approx(4 * 16 / 61)
    assert (micro_batch(64, 2), micro_batch(65, 2), rank_batch(33, 16), rank_batch(32, 16)) == (32, 33, 3, 2)


def test_handoff_over_the_nic_or_nvlink(catalog):
    llama = catalog.models["llama-3.1-405b"]
    # 16 GPUs leave the 8-GPU NVLink domain: 20 us + 32 x 16384 x 2 B / (8 x 50 GB/s x 0.85)
    nic = pp_handoff_s(llama, catalog.gpus["h100-sxm"], Layout(8, 2), 32, DEFAULT_PHYSICS, LAYOUT_PHYSICS)
    assert nic == pytest.approx(20e-6 + 32 * 16384 * 2 / (8 * 50e9 * 0.85))
    gb200 = catalog.gpus["gb200"]
    nvl = pp_handoff_s(llama, gb200, Layout(8, 2), 32, DEFAULT_PHYSICS, LAYOUT_PHYSICS)
    # inside the NVL72 domain: the family's collective latency and the NVLink efficiency of the physics
    fam = DEFAULT_PHYSICS.family(gb200.family)
    assert nvl == pytest.approx(fam.collective_latency_s + 32 * 16384 * 2 / (
        8 * gb200.scaleup_bandwidth_bytes_per_s * DEFAULT_PHYSICS.comm_bandwidth_efficiency))
    assert pp_handoff_s(llama, gb200, Layout(8), 32, DEFAULT_PHYSICS, LAYOUT_PHYSICS) == 0.0


def test_expert_all_to_all(catalog):
    ds, h100 = catalog.models["deepseek-v3"], catalog.gpus["h100-sxm"]
    assert ep_alltoall_s(1e6, 16, 50e9, 0.85, 20e-6) == pytest.approx(20e-6 + 15 / 16 * 1e6 / (50e9 * 0.85))
    assert ep_alltoall_s(1e6, 1, 50e9, 0.85, 20e-6) == 0.0
    # ep 16 on 8-GPU nodes: over the NIC, dispatch + combine, at the busiest GPU (x1.2)
    msg = 1024 / 16 * 8 * 7168 * 2
    want = 2 * 1.2 * (20e-6 + 15 / 16 * msg / (50e9 * 0.85))
    assert moe_comm_time_s(ds, h100, Layout(1, 1, 16, 16), 1024, DEFAULT_PHYSICS, LAYOUT_PHYSICS) == pytest.approx(want)
    # ep 8 stays on NVLink: much faster for the same tokens per GPU (4.8x at the fitted 0.398 of
    # the scale-up bandwidth and 2.19 us a collective)
    inside = moe_comm_time_s(ds, h100, Layout(1, 1, 8, 8), 512, DEFAULT_PHYSICS, LAYOUT_PHYSICS)
    assert inside < want / 4


def test_memory_per_gpu_from_the_layout(catalog):
    llama, ds = catalog.models["llama-3.1-405b"], catalog.models["deepseek-v3"]
    assert weights_per_gpu_bytes(llama, Layout(8, 2), "bf16") == pytest.approx(405.85e9 * 2 / 16)
    experts = routed_expert_params(ds)
    want = (671e9 - experts) / 1 + experts / 16
    assert weights_per_gpu_bytes(ds, Layout(1, 1, 16, 16), "fp8") == pytest.approx(want)
    # attention DP: each rank keeps its own sequences' MLA latents, no copy per TP rank; dense
    # weights are held by every rank
    e = step(catalog, "deepseek-v3", "h100-sxm", Layout(1, 1, 16, 16), 512)
    kv = kv_bytes_per_sequence(ds, "bf16", 2400, True, 16)
    assert e.memory_needed_bytes == pytest.approx(671e9 + 15 * (671e9 - experts) + 512 * kv)
    assert e.memory_usable_bytes == pytest.approx(16 * 80e9 * 0.9)


def test_pipeline_step_is_stages_plus_handoff(catalog):
    """Seed preset (no collectives): T = one micro-batch of B/pp through all layers + one hand-off."""
    llama = catalog.models["llama-3.1-405b"]
    rank = step(catalog, "llama-3.1-405b", "h100-sxm", Layout(8), 32, "bf16", "seed")
    piped = step(catalog, "llama-3.1-405b", "h100-sxm", Layout(8, 2), 64, "bf16", "seed")
    handoff = pp_handoff_s(llama, catalog.gpus["h100-sxm"], Layout(8, 2), 32, DEFAULT_PHYSICS, LAYOUT_PHYSICS)
    assert piped.step_time_s == pytest.approx(rank.step_time_s + handoff)
    assert piped.replica_tokens_per_s == pytest.approx(64 / piped.step_time_s)
    assert piped.fits and not step(catalog, "llama-3.1-405b", "h100-sxm", Layout(8), 1, "bf16", "seed").fits


def test_layout_steps_grow_with_the_batch(catalog):
    """Candidate search bisects on the batch: step time and memory never fall as it grows."""
    for model, lay in (("llama-3.1-405b", Layout(8, 2)), ("deepseek-v3", Layout(1, 1, 16, 16)),
                       ("deepseek-v3", Layout(2, 1, 16, 8))):
        prev = None
        for b in range(1, 300, 7):
            e = step(catalog, model, "h100-sxm", lay, b)
            if prev is not None:
                assert e.step_time_s >= prev.step_time_s and e.memory_needed_bytes >= prev.memory_needed_bytes
            prev = e


def test_pipeline_only_where_the_weights_do_not_fit(catalog):
    opts = parse_scenario({"products": [{"name": "p", "model": "llama-3.1-70b", "peak_qps": 1, "input_tokens": 10,
                                         "output_tokens": 10}]}, "s").options
    preset, h100 = get_preset("default"), catalog.gpus["h100-sxm"]
    assert replica_layouts(catalog.models["llama-3.1-70b"], h100, 8, "fp8", opts, preset) == [Layout(8)]
    # 811 GB of bf16 weights: pp 2 on 8 GPUs (pp 4 would fit with fewer), pp 2 and 4 on 4 GPUs
    assert replica_layouts(catalog.models["llama-3.1-405b"], h100, 8, "bf16", opts, preset) == [Layout(8), Layout(8, 2)]
    assert replica_layouts(catalog.models["llama-3.1-405b"], h100, 4, "bf16", opts, preset) == [
        Layout(4), Layout(4, 2), Layout(4, 4)]
    ds = replica_layouts(catalog.models["deepseek-v3"], h100, 1, "fp8", opts, preset)
    assert [lay.label() for lay in ds] == ["tp1", "tp1·pp2", "tp1·pp4", "dp8·ep8", "dp16·ep16", "dp32·ep32", "dp64·ep64"]


def test_whole_instances_take_whole_nodes():
    assert fits_instances(8, 16, 8) and fits_instances(2, 2, 8) and fits_instances(4, 8, None)
    assert not fits_instances(4, 12, 8) and not fits_instances(16, 16, 8)


def _plan(catalog, model, precision, **options):
    raw = {"products": [{"name": "chat", "model": model, "precision": precision, "peak_qps": 5, "input_tokens": 2000,
                         "output_tokens": 400, "min_tokens_per_s_per_user": 10}],
           "options": {"gpus": ["h100-sxm"], **options}}
    return plan_to_dict(make_plan(parse_scenario(raw, "s"), catalog, alternatives=False))


def test_plans_for_models_beyond_one_node(catalog):
    llama = _plan(catalog, "llama-3.1-405b", "bf16")["products"][0]
    assert (llama["tp"], llama["pp"], llama["gpus_per_replica"], llama["nodes_per_replica"]) == (8, 2, 16, 2)
    assert llama["gpus"] == llama["replicas"] * 16 and llama["layout"] == "tp8·pp2"
    ds = _plan(catalog, "deepseek-v3", "fp8")["products"][0]
    assert ds["gpus_per_replica"] >= 16 and ds["ep"] >= 16 and ds["nodes_per_replica"] >= 2
    assert ds["gpus"] == ds["replicas"] * ds["gpus_per_replica"]
    for key in ("pp", "ep", "dp_attention", "gpus_per_replica", "nodes_per_replica"):
        assert key in ds["prefill"]


def test_options_restrict_the_layout(catalog):
    product = parse_scenario({"products": [{"name": "p", "model": "deepseek-v3", "peak_qps": 5, "input_tokens": 2000,
                                            "output_tokens": 400, "precision": "fp8"}],
                              "options": {"gpus": ["h100-sxm"], "ep": [16], "dp_attention": [16]}}, "s")
    cs = generate_candidates(product.products[0], catalog.models["deepseek-v3"], catalog, product.options,
                             get_preset("default"))
    # exactly the listed degrees: experts over 16 of the GPUs of a 16-rank stage (up to 64 GPUs)
    assert cs.candidates and {(c.ep, c.dp_attention, c.pp) for c in cs.candidates} == {(16, 16, 1)}
    assert {c.tp for c in cs.candidates} <= {1, 2, 4}


def test_estimate_flags_and_errors(capsys):
    argv = ["estimate", "--model", "llama-3.1-405b", "--gpu", "h100-sxm", "--tp", "8", "--pp", "2", "--batch", "64",
            "--precision", "bf16", "--input-tokens", "2000", "--output-tokens", "400", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["pp"], d["gpus_per_replica"], d["nodes_per_replica"], d["layout"]) == (2, 16, 2, "tp8·pp2")
    assert d["memory_per_gpu_bytes"] < 80e9 * 0.9 and d["fits_in_memory"]
    assert main([*argv[:-1], "--ep", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fleetplan: error: --ep: ep 2 needs a mixture-of-experts model")


def test_validate_reads_pp_and_dp_attention(tmp_path, capsys):
    f = tmp_path / "m.csv"
    f.write_text("model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,measured_tpot_ms,ep,pp,dp_attention\n"
                 "deepseek-v3,h100-sxm,fp8,1,1024,2000,400,sglang,60,16,,16\n"
                 "llama-3.1-405b,h100-sxm,bf16,8,64,2000,400,vllm,80,,2,\n", encoding="utf-8")
    assert main(["validate", str(f), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 2 and all(r["predicted_tpot_ms"] > 0 for r in rows)


def test_frozen_layout_physics_values():
    """The layout's constants, each documented with its reason in models/layout.py."""
    assert dataclasses.astuple(LAYOUT_PHYSICS) == (20e-6, 0.85, 1.2)
