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
# A solve whose result informs the plan but is not the plan itself is solved to 0.1%: on a
# $100,000 plan such a figure is exact to $100, and at 0.01% one 168-hour runner-up MIP alone
# took its whole share of the deadline. The gaps below each name one such use of this number.
SECONDARY_GAP = 1e-3
# Runner-ups and the cost of each prefill mode are explanations, not the plan.
EXPLANATION_GAP = SECONDARY_GAP
# The budget check's quick re-plan only decides whether the budget holds (at least this gap).
BUDGET_CHECK_GAP = SECONDARY_GAP

# ---- tolerances
# Two costs within half a cent are equal (a plan is reported in cents).
MONEY_TOLERANCE_USD = 0.005
# Demand divided by a replica's throughput is rounded up to whole replicas after taking off this
# much, so a quotient that is whole up to rounding error does not buy one replica more.
CEILING_TOLERANCE = 1e-9

# ---- the deadline (optimizer/runtime/deadline.py)
# Without ``options.time_limit_s`` a command takes at most this long: long enough to prove most
# plans optimal (the shipped examples need seconds), short enough that an edit to a scenario
# never leaves a user waiting for minutes without an answer.
DEFAULT_TIME_LIMIT_S = 60.0
# Candidate generation may take at most this share of the time left when it starts: cut there, the
# MIPs and explanations still have the rest to return a plan on the configurations generated.
CANDIDATE_SHARE = 0.5
# Every MIP gets at least this long once started, so that a solver can return the plan it has.
MIN_SOLVE_S = 0.05

# ---- the per-configuration search (search.py)
# First slice of one configuration's MIP in a multi-hour search, in branch-and-bound nodes: a
# count, so where a slice ends (and so which plan the search keeps) is the same on every machine
# and at any load, where a slice of seconds ended wherever the clock said (about a second of
# HiGHS on these MIPs here). A MIP not finished in its slice goes back in the queue and gets four
# times as many nodes when it comes round again.
MIP_SLICE_NODES = 2000
# Slices a MIP gets at most (2,000 x (1 + 4 + ... + 4^5) = 2,730,000 nodes) before its bound is left open.
MIP_MAX_TRIES = 6
# Dollars a month by which a proven bound may fall short of ``mip_rel_gap`` and the plan still count
# as optimal: a MIP whose bound stalls a few cents or dollars short of its cutoff (the last
# 0.001% of a 168-hour, three-tier model) is not searched again for the rest of the deadline.
# The reported ``mip_gap`` is the proven one, whatever it is.
ABS_GAP_USD = 1.0
# Choices whose model is built first in a multi-hour search (those with the lowest quick bound):
# their best plan prunes the rest before the rest's model is built (in rounds four times larger).
FIRST_ROUND_CHOICES = 8

# ---- solver settings (solvers.py)
# Rows HiGHS keeps in its cut pool before it evicts old cuts (its default is 10,000). Every node's
# LP carries the pool's upkeep: portfolio-20's joint MIP (1,477 columns, under 100 after presolve)
# held 4,000-5,000 cuts and spent 3.5 ms a node, 1.6 ms with 250. Medians of 3 on this machine
# (benchmarks/bench_portfolio.py, 2026-12-02): portfolio-20 2.8 -> 2.2 s, its relaxed-H200 re-plan
# 4.2 -> 3.4 s, the 40-product portfolio 4.8 -> 3.1 s; the every-hour-distinct portfolio 122 ->
# 147 s (its search path moves with
# the pool size: 112-155 s for pools of 962 to 10,000 rows). The stress
# cases, the trace week's one-hour MIPs and every example plan the same in the same time.
HIGHS_CUT_POOL_ROWS = 250
# HiGHS explores at most this many branch-and-bound nodes of a MIP before the same MIP goes to
# SCIP (a count, not a time, so the hand-over is the same on every machine). Knapsack-like MIPs
# (hours that round up against a capped API share) can leave HiGHS proving the last 0.01% for
# minutes where SCIP's cuts close it in a second. 2,000 rather than 500: portfolio-20's joint MIP
# on the fitted model closes in about 1,000 HiGHS nodes (3.1 s) but took 2 s of HiGHS and 3 s
# of SCIP when handed over at 500 (plan 4.2 s instead of 6.3 s; the stress cases unchanged).
HIGHS_NODE_LIMIT = 2000

# ---- coupled groups (components.py)
# A coupled group whose joint MIP would have more columns than this is planned product by product
# (see :func:`solve_one_by_one`): beyond it, building the joint model alone takes minutes and
# gigabytes, and HiGHS rarely finds a first plan within a minute.
JOINT_MAX_COLUMNS = 60_000

# ---- decomposed groups (portfolio.py)
# Relative gap each product of a decomposed group is searched to: the group's own gap is judged
# against a bound of the whole group, so proving each product far below it only spends time.
PRODUCT_GAP = SECONDARY_GAP
# Shares of a decomposed group's time: each product's own search first, then the instance
# bound, then the products are planned again on the GPU types chosen together (what is left).
OWN_SHARE = 0.8
BOUND_SHARE = 0.05
# Share of a decomposed group's time kept for the Lagrangian bound when some GPU types are scarce
# (its iterations take about 0.06 s each on the 50-product stress portfolio).
LAGRANGIAN_SHARE = 0.05
# The instance bound's master is solved to this relative gap (its bound is valid at whatever gap
# the solver proves).
MASTER_GAP = SECONDARY_GAP
# A product's plan is replaced only when the group saves more than this, USD per month.
BEST_RESPONSE_SAVING_USD = 1.0
# Rounds of planning products on the GPU types chosen together (the plans of one round can move
# the choice of the next).
PORTFOLIO_ROUNDS = 3
# Seconds kept from those searches for the final choice of types (:func:`_cheapest_choice`: three
# type searches and fills, a few seconds for 50 products on 14 GPU types and 168 hours).
FINAL_CHOICE_S = 5.0
# A GPU over the availability of its type in some hour counts as this many USD per month in
# :class:`TypeChoice`, so the search leaves an infeasible choice first.
OVER_AVAILABILITY_USD = 1e7
# The type search accepts a move that saves at least this much a month (ignores rounding noise),
# and sweeps over every product and GPU type at most this many times.
IMPROVEMENT_USD = 1.0
MAX_SWEEPS = 50

# ---- a mix hour by hour (mix_hours.py)
# seconds each hour's MIP gets at least: enough for HiGHS to find a plan of a one-hour mix over
# the whole catalog (0.2-1.1 s to prove one here). Past the deadline no hour is solved any more
# (see :func:`_free_hours`) except those of the first pool option priced, which the plan needs
# (see :func:`_price_option`): the plan covers every hour and its gap says what is unproven.
HOUR_MIN_S = 1.0
# A long horizon's hours (past the busiest) are solved in this many runs of rising demand, each on
# its own from its quietest hour up (:func:`solve_hours`), so that worker processes can take them
# at once; a fixed number, so that the plan is the same however many run at once. Each run costs
# a MIP or two more than one run would (its quietest hour is never carried from a quieter one).
HOUR_RUNS = 4
HOUR_RUNS_FROM = 48  # hours: fewer are solved in one run

# ---- candidate generation (candidates.py)
# relative width of the band of spreads :meth:`_Shape.spread_band` leaves undecided
SPREAD_BAND = 1e-9
# shortest spread searched: far below one decode step (microseconds), and positive, which the
# queueing model needs
SHORTEST_SPREAD_S = 1e-12
# doublings and halvings allowed to bracket and narrow a TTFT threshold (2^-200 is below any float step)
THRESHOLD_STEPS = 200
# throughputs this close (relative) are equal: in a compute-bound roofline B / step is constant in
# the batch and differs only by float rounding, and the largest such batch is kept
THROUGHPUT_TIE = 1e-9

# ---- replica layouts searched (layouts.py)
# most GPUs in one pipeline stage (tp x dp_attention), a cap on the search: it covers the EP 16-64
# layouts reported for DeepSeek-class models on 8-GPU nodes and most of a 72-GPU NVL72 domain
MAX_STAGE_GPUS = 64

# ---- request histograms (histogram.py)
# how far the shares of a mix may sum from 1 (rounding in a hand-written list); they are then scaled to 1
SHARE_TOLERANCE = 0.01
# Most buckets in one request mix. A mix is planned bucket by bucket before the solver starts:
# each bucket's configurations, then its capacity on every other bucket's (work that grows with
# the square of the buckets; the command's deadline cuts it short, leaving a poorer plan): 256 buckets
# of distinct sizes plan in about 6 s on every GPU type, 1,000 took 38 s and 5,000 did not end
# within minutes. Finer than 256 log-spaced buckets, neighbouring sizes differ by a few percent.
MAX_REQUEST_BUCKETS = 256

# ---- the tornado (sensitivity.py)
# The tornado's swing: every input 20% below and above the scenario's value.
SWING = 0.20
# Re-plans of a tornado are a picture of the slope, not a proof.
SENSITIVITY_GAP = SECONDARY_GAP

# ---- replaying a plan from a trace (verify.py)
# requests replayed per product: the first of the trace hour (the busiest code-completion hour
# the method was built against holds 7,717; a 1,000,000-request week's busiest about 10,000)
REPLAY_REQUESTS = 20_000
# tightening rounds at most (each a MIP solve and a replay); the deadline usually ends it first
REPLAY_ROUNDS = 8
# the replica scale searched on a replay: doubled up to this, then bisected
MAX_SCALE = 64.0
# bisection steps of the replica scale (each a replay): to the replica where counts are small
SCALE_BISECTIONS = 4
# planned demand kept just below the scaled capacity so the MIP's ceiling lands on it
CEILING_MARGIN = 0.999

# ---- simulating a plan (simulate_plan.py)
# Requests simulated per product unless told: the same count a trace's replay takes
# (:data:`REPLAY_REQUESTS`), enough for a stable p99 at the busiest hour of every shipped example.
DEFAULT_REQUESTS = 20_000
# Most replicas (decode, a mix's configurations together, or a prefill pool's) one product's
# simulation models in an hour: each holds its own queue and batch (about 1 kB), is built before
# the first event, and every arrival scans them for the least loaded one, so memory and time grow
# with them (a hand-edited 10^12 asked for terabytes); fifty times the most any shipped example
# runs (206).
MAX_SIMULATED_REPLICAS = 10_000

# ---- reading a trace (trace.py)
# Log-spaced request-size buckets a trace is summarised into unless told: few enough that the mix
# plans in seconds, enough to separate short chat turns from long documents.
DEFAULT_BUCKETS = 4
# Each hour's rate is this percentile of its per-minute arrival rates: a busy minute, not the mean
# (which a burst would exceed) nor the maximum (one outlier minute would size the whole hour).
DEFAULT_PERCENTILE = 0.95

# ---- arrival statistics of a trace (arrival_stats.py)
# bins of the burst length: 10 s (see the module docstring)
BURST_BIN_S = 10.0
# fewest requests whose gaps give an SCV (two gaps)
MIN_REQUESTS_FOR_SCV = 3

# ---- sweeps (sweep.py)
# A sweep runs at most this many points unless its ``max_points`` allows more: a point is one plan
# of a second to a minute, so 10,000 points already keep two local workers busy for hours; a
# grid past it is more often a step typed too small than a sweep meant.
DEFAULT_MAX_POINTS = 10_000
# The most a sweep's ``max_points`` allows: more points than this is a sweep for a cluster scheduler's
# batch queue, not for one command (the points and their rows are held in memory).
MAX_POINTS = 1_000_000

# ---- worker processes (workers.py)
# Seconds a terminated worker gets to end before it is killed: a worker ends at once on SIGTERM
# (see workers.py), so this only bounds a worker stuck in a C call.
JOIN_TIMEOUT_S = 5.0
MAX_DEFAULT_JOBS = 4  # worker processes a plan uses by default: the CPUs it may run on, at most this many
