"""Benchmark ``fleetplan report`` as a user runs it: wall time, CPU and the page.

For each scenario (default: ``examples/portfolio-20.yaml``), ``fleetplan report FILE --out
PAGE.html`` runs ``--runs`` times in a fresh process each (interpreter start, imports, the plan,
the binding-limit worker, the tornado and the page included). Printed: the median, min and max
wall seconds, the median CPU seconds of the command and its worker, the page's size, whether it
names any external URL in a ``src`` or ``href`` (it must not), and the plan's total from the page.
Each run has a deadline (``--timeout``, default 120 s).

    python benchmarks/bench_report.py [--runs 5] [--timeout 120] [SCENARIO.yaml ...]
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "examples" / "portfolio-20.yaml"


def _children_cpu_s() -> float:
    """CPU seconds (user and system) of every child process waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(scenario: Path, page: Path, timeout_s: float) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one report of ``scenario`` written to ``page``."""
    exe = str(Path(sys.executable).parent / "fleetplan")
    cpu0, t0 = _children_cpu_s(), time.perf_counter()
    proc = subprocess.run([exe, "report", str(scenario), "--out", str(page)], capture_output=True, text=True,
                          timeout=timeout_s)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{scenario.name}: fleetplan report exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return wall, _children_cpu_s() - cpu0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", type=Path, default=[DEFAULT])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds each run may take")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in args.scenarios:
            page = Path(tmp) / f"{scenario.stem}.html"
            rows = []
            for i in range(args.runs):
                rows.append(run_once(scenario, page, args.timeout))
                print(f"  {scenario.name}: run {i + 1}/{args.runs} {rows[-1][0]:.2f} s", file=sys.stderr, flush=True)
            walls = [w for w, _ in rows]
            text = page.read_text(encoding="utf-8")
            external = [u for u in re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text) if not u.startswith("#")]
            total = re.search(r'data-usd="([\d.]+)"', text)
            print(f"{scenario.name:28} wall median {statistics.median(walls):5.2f} s (min {min(walls):.2f}, "
                  f"max {max(walls):.2f}) over {args.runs}  cpu {statistics.median(c for _, c in rows):5.2f} s  "
                  f"page {len(text.encode('utf-8')) / 1e3:,.0f} KB  external URLs {len(external)}  "
                  f"total ${float(total.group(1)) if total else float('nan'):,.2f}", flush=True)


if __name__ == "__main__":
    main()
