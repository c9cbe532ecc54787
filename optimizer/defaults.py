"""The planner's policy numbers, each once, with the reason for its value.

Physics (bandwidth efficiencies, overheads, latencies) lives in :mod:`fleetplan.models.physics`;
this module holds what the planner decides or assumes about a scenario when the user says
nothing, and the tolerances it compares numbers with.

No logic lives here, only the numbers."""

from __future__ import annotations

# ---- headroom: share of decode throughput held back
# The seed document's flat rule: 30% of decode throughput kept for prefill and bursts when
# prefill is not computed (``prefill: headroom``).
SEED_HEADROOM = 0.30
# When prefill is computed (colocated, pool, auto) only bursts within an hour remain: 10%, the
# margin serving engines' autoscalers commonly keep below saturation.
BURST_HEADROOM = 0.10

# ---- prices: used when the catalog or scenario gives no tier price
# A one-year commitment typically saves 30-40% on the on-demand price (reference price notes in
# catalogs/prices.yaml); 30% is the conservative end.
RESERVED_DISCOUNT = 0.30
# Spot capacity is commonly offered at 50-70% off; 50% is the conservative end.
SPOT_DISCOUNT = 0.50

# ---- search space
# Largest batch searched when ``options.batch`` is not given: vLLM's and SGLang's default cap on
# running sequences is 256-1024; 512 covers every decode-optimal batch seen in the catalog.
MAX_BATCH = 512
# A GPU whose scale-up (NVLink) domain holds at least this many GPUs is rack-scale (NVL72 and
# the like): a prefill pool hands its KV cache over that fabric, not over the NIC.
RACK_SCALE_GPUS = 16

# ---- the one deadline
# Of the time a plan is given, the main solve may use this share; the explanations (runner-ups on
# other GPU types, the cost of each prefill mode) share this share of what is left, and the
# baselines the rest. Proven plans take far less, so explanations usually get most of the time.
MAIN_SOLVE_SHARE = 0.75
EXPLAIN_SHARE = 0.8
# Of a product's share of the explanation time, the runner-ups on other GPU types may use this
# much; the cost of each prefill mode gets the rest.
RUNNER_UP_SHARE = 0.7

# ---- explanations
# A request mix over a long horizon searches its runner-ups (the mix kept to each GPU type) from the
# type with the least lower bound up, and leaves out a type whose bound is at least the cost of the
# RUNNER_UP_TYPES-th cheapest found: the cheapest that many types are still exact, and a type that
# cannot be among them costs it no 168-hour search.
RUNNER_UP_TYPES = 3
# By default such a mix's runner-ups and prefill-mode costs are searched only when the mix is
# small: its distinct hours times its configurations (decode and pool) below this. Each search
# costs about what the plan's own did: 0.1 s for all of them on examples/chat-trace.yaml (168
# hours x 26 configurations), about 30 s on the 1,000,000-request trace week of
# benchmarks/bench_trace.py (168 x 293) against 19 s for the plan. Above it they are listed by
# lower bound, unsearched (``fleetplan plan --all-alternatives`` searches them).
RUNNER_UP_SEARCH_SIZE = 20_000
# Runner-ups and the cost of each prefill mode are explanations, not the plan: solved to 0.1%
# (on a $100,000 plan a comparison is exact to $100; at 0.01% one 168-hour runner-up MIP alone
# took its whole share of the deadline).
EXPLANATION_GAP = 1e-3

# ---- tolerances
# Two costs within half a cent are equal (a plan is reported in cents).
MONEY_TOLERANCE_USD = 0.005
# Demand divided by a replica's throughput is rounded up to whole replicas after taking off this
# much, so a quotient that is whole up to rounding error does not buy one replica more.
CEILING_TOLERANCE = 1e-9
