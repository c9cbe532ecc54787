"""``options.ep``, ``options.pp`` and ``options.dp_attention`` restrict the search exactly or are
refused by name: every plan and candidate uses only listed degrees, and a degree no product's
model can run is an input error naming the field, the rule and the nearest degree that works."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetplan.catalogs.loader import InputError
from fleetplan.main import main
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.problem_data.candidates import generate_candidates
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.traffic.scenario import parse_scenario


def _scenario(models: list[str], **options: Any) -> Any:
    products = [{"name": f"p{i}", "model": m, "peak_qps": 2, "input_tokens": 2000, "output_tokens": 400,
                 "precision": "fp8", "min_tokens_per_s_per_user": 10, "prefill": "headroom"}
                for i, m in enumerate(models)]
    return parse_scenario({"preset": "default", "products": products,
                           "options": {"gpus": ["h100-sxm"], **options}}, "s")


def _layouts(catalog: Any, model: str, **options: Any) -> set[tuple[int, int, int, int]]:
    sc = _scenario([model], **options)
    cs = generate_candidates(sc.products[0], catalog.models[model], catalog, sc.options, get_preset("default"),
                             prune=False)
    return {(c.tp, c.pp, c.ep, c.dp_attention) for c in cs.candidates}


def test_dp_attention_excludes_one_rank_layouts(catalog):
    # qwen3-30b-a3b fits one GPU: without the restriction a tp1 replica is the cheapest
    seen = _layouts(catalog, "qwen3-30b-a3b", dp_attention=[8])
    assert seen and {dp for *_, dp in seen} == {8}
    plan = make_plan(_scenario(["qwen3-30b-a3b"], dp_attention=[8]), catalog, alternatives=False)
    (p,) = plan.products
    assert p.candidate.dp_attention == 8 and p.candidate.gpus_per_replica % 8 == 0


def test_ep_and_pp_are_searched_exactly(catalog):
    assert {ep for _, _, ep, _ in _layouts(catalog, "qwen3-30b-a3b", ep=[4], dp_attention=[1, 8])} == {4}
    # llama-3.1-70b fits 2 GPUs in fp8 without stages: pp 2 alone is still searched, as listed
    seen = _layouts(catalog, "llama-3.1-70b", pp=[2], tp=[2, 4])
    assert seen == {(2, 2, 1, 1), (4, 2, 1, 1)}


@pytest.mark.parametrize(("models", "options", "message"), [
    (["llama-3.1-70b"], {"ep": [8]},
     "options.ep: 8 applies only to mixture-of-experts models; llama-3.1-70b is dense (use 1)"),
    (["llama-3.1-70b"], {"ep": [1, 8]},
     "options.ep: 8 applies only to mixture-of-experts models; llama-3.1-70b is dense (use 1)"),
    (["llama-3.1-70b"], {"dp_attention": [8]},
     "options.dp_attention: 8 applies only to mixture-of-experts models; llama-3.1-70b is dense (use 1)"),
    (["deepseek-v3"], {"dp_attention": [3]},
     "options.dp_attention: 3 gives no layout deepseek-v3 can run: ep 3 does not divide deepseek-v3's 256 experts "
     "(experts over each stage's tp x dp_attention GPUs must divide its 256 experts) (nearest valid choice: 2)"),
    (["deepseek-v3"], {"dp_attention": [128]},
     "options.dp_attention: 128 gives no layout deepseek-v3 can run: tp 1 x dp_attention 128 exceeds the 64 GPUs "
     "a stage may have (experts over each stage's tp x dp_attention GPUs must divide its 256 experts) "
     "(nearest valid choice: 64)"),
    (["llama-3.1-8b"], {"pp": [40]}, "options.pp: 40 exceeds llama-3.1-8b's 32 layers (nearest valid choice: 32)"),
    (["llama-3.1-70b", "deepseek-v3"], {"ep": [8]},
     "options.ep: [8] leaves llama-3.1-70b no layout: 8 applies only to mixture-of-experts models; "
     "llama-3.1-70b is dense (use 1)"),
])
def test_restrictions_no_model_can_run_are_refused(catalog, models, options, message):
    with pytest.raises(InputError) as err:
        make_plan(_scenario(models, **options), catalog, alternatives=False)
    assert str(err.value) == message


def test_a_degree_one_product_can_use_is_kept_for_it(catalog):
    # ep 1 serves the dense product, ep 8 the mixture-of-experts one: both honoured
    plan = make_plan(_scenario(["llama-3.1-8b", "qwen3-30b-a3b"], ep=[1, 8]), catalog, alternatives=False)
    by = {p.product.name: p.candidate for p in plan.products}
    assert by["p0"].ep == 1 and by["p1"].ep in (1, 8)


def test_refusal_is_one_line_and_exit_2(tmp_path: Path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("products:\n  - {name: chat, model: llama-3.1-70b, peak_qps: 1, input_tokens: 100,"
                    " output_tokens: 100}\noptions:\n  ep: [8]\n", encoding="utf-8")
    assert main(["plan", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "fleetplan: error: options.ep: 8 applies only to mixture-of-experts models; llama-3.1-70b is dense (use 1)"]
