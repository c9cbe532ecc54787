"""Stress scenarios for the planner's deadline: written to a folder as ordinary scenario files.

    python benchmarks/stress_cases.py OUT_DIR

writes
- ``portfolio-50.yaml``: 50 products over the full GPU catalog, 168 distinct demand hours
  (each product's weekly profile scaled hour by hour by a seeded U(0.9, 1.0)), reserved +
  on-demand + spot capacity with a spot cap, a hosted API (capped at 50%) on every third
  product, 8-GPU instances and availability limits on three GPU types;
- ``pool-24h-capped-api.yaml``: one product with a prefill pool, a 24-hour profile and an API
  capped at 50%;
- ``chat-diurnal-blend-90qps.yaml``: ``examples/chat-diurnal-blend.yaml`` at 90 QPS;
- ``blend-auto-prefill-1s.yaml``: ``examples/chat-diurnal-blend.yaml`` with prefill left to the
  planner, a one-second time limit and a gap of 0 (the deadline, not a proof, ends the search:
  the command should end within seconds with a feasible plan and its gap);
and the profiles they read. Scenarios are plain YAML, so ``fleetplan plan`` runs them as a user
would.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# (model, precision, input tokens, output tokens, tokens/s per user, API allowed for this model)
SHAPES = [
    ("llama-3.1-70b", "fp8", 1500, 350, 30, True),
    ("llama-3.1-8b", "fp8", 8000, 300, 25, True),
    ("qwen3-32b", "fp8", 3000, 250, 40, True),
    ("mixtral-8x7b", "fp8", 4000, 200, 15, True),
    ("gpt-oss-120b", "fp4", 1500, 350, 30, True),
    ("qwen3-235b-a22b", "fp8", 8000, 300, 25, True),
    ("llama-3.3-70b", "fp8", 3000, 250, 30, True),
]
PROFILES = ["chat-diurnal-week.csv", "batch-flat-day.csv", "launch-spiky-week.csv"]


def _weekly(path: Path) -> list[float]:
    rows = [r.split(",") for r in path.read_text().splitlines()[1:] if r.strip()]
    values = [float(v) for _, v in rows]
    return (values * 7)[:168] if len(values) == 24 else values


def write_profiles(out: Path, products: int, seed: int = 7) -> list[str]:
    """One weekly profile per product, every hour scaled by U(0.9, 1.0): no two hours alike."""
    rng = random.Random(seed)
    (out / "profiles").mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(products):
        base = _weekly(EXAMPLES / "profiles" / PROFILES[i % len(PROFILES)])
        name = f"profiles/p{i:02d}.csv"
        rows = "".join(f"{h},{v * rng.uniform(0.9, 1.0):.6f}\n" for h, v in enumerate(base))
        (out / name).write_text("hour,multiplier\n" + rows)
        names.append(name)
    return names


def portfolio_50(out: Path) -> dict:
    """The 50-product, full-catalog, three-tier, 168-distinct-hour portfolio."""
    rng = random.Random(11)
    profiles = write_profiles(out, 50)
    products = []
    for i in range(50):
        model, precision, n_in, n_out, speed, api_ok = SHAPES[i % len(SHAPES)]
        p = {
            "name": f"p{i:02d}-{model}",
            "model": model,
            "precision": precision,
            "peak_qps": round(rng.uniform(3, 40), 1),
            "input_tokens": n_in,
            "output_tokens": n_out,
            "min_tokens_per_s_per_user": speed,
            "prefix_cache_hit_rate": 0.3,
            "demand_profile": profiles[i],
        }
        if i % 3 == 0 and api_ok:
            p["api"] = {"model": model, "max_fraction": 0.5}
        products.append(p)
    return {
        "preset": "default",
        "products": products,
        "options": {"tiers": ["reserved", "on_demand", "spot"], "spot_max_share": 0.2},
        "limits": {"gpu_availability": {"h100-sxm": 512, "h200-sxm": 128, "b200": 64}, "instance_gpus": 8},
    }


def pool_24h_capped_api(out: Path) -> dict:
    """One product: prefill pool, a 24-hour profile, an API capped at 50%."""
    (out / "profiles").mkdir(parents=True, exist_ok=True)
    (out / "profiles" / "peak-hour-day.csv").write_text((EXAMPLES / "profiles" / "peak-hour-day.csv").read_text())
    return {
        "preset": "default",
        "products": [{
            "name": "rag", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 40, "input_tokens": 12000,
            "output_tokens": 300, "min_tokens_per_s_per_user": 25, "prefix_cache_hit_rate": 0.3, "prefill": "pool",
            "demand_profile": "profiles/peak-hour-day.csv", "api": {"model": "llama-3.1-70b", "max_fraction": 0.5},
        }],
        "options": {"gpus": ["h100-sxm", "h200-sxm", "b200", "mi300x"]},
    }


def blend_90qps(out: Path) -> dict:
    """``examples/chat-diurnal-blend.yaml`` with ``peak_qps: 90``."""
    raw = yaml.safe_load((EXAMPLES / "chat-diurnal-blend.yaml").read_text())
    raw["products"][0]["peak_qps"] = 90
    (out / "profiles").mkdir(parents=True, exist_ok=True)
    for name in PROFILES:
        (out / "profiles" / name).write_text((EXAMPLES / "profiles" / name).read_text())
    return raw


def blend_auto_prefill_1s(out: Path) -> dict:
    """``examples/chat-diurnal-blend.yaml`` with ``prefill: auto``, ``time_limit_s: 1`` and ``mip_rel_gap: 0``."""
    raw = blend_90qps(out)
    raw["products"][0]["peak_qps"] = 300
    raw["products"][0]["prefill"] = "auto"
    raw["options"].update(time_limit_s=1.0, mip_rel_gap=0.0)
    return raw


CASES = {
    "portfolio-50.yaml": portfolio_50,
    "pool-24h-capped-api.yaml": pool_24h_capped_api,
    "chat-diurnal-blend-90qps.yaml": blend_90qps,
    "blend-auto-prefill-1s.yaml": blend_auto_prefill_1s,
}


def write_cases(out: Path) -> list[Path]:
    """Write every stress scenario (and its profiles) into ``out``; returns the scenario paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in CASES.items():
        path = out / name
        path.write_text(yaml.safe_dump(make(out), sort_keys=False))
        paths.append(path)
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/stress_cases.py OUT_DIR")
    for p in write_cases(Path(sys.argv[1])):
        print(p)
