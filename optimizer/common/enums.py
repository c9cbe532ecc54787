"""The planner's closed vocabularies, each defined once: pricing tiers, solve statuses, prefill
modes, what limits a configuration's batch and which comparisons a plan searches. String enums:
they compare equal to, and are written to JSON as, their plain values, so scenario files and plan
JSON keep their words.

No logic lives here; string literals of these words elsewhere in the package are a defect."""

from __future__ import annotations

from enum import StrEnum


class Tier(StrEnum):
    """How capacity is bought: reserved all month, on demand or spot hour by hour."""

    RESERVED = "reserved"
    ON_DEMAND = "on_demand"
    SPOT = "spot"


TIERS: tuple[Tier, ...] = tuple(Tier)


class Status(StrEnum):
    """Outcome of one solve. A plan is only ever ``optimal`` or ``time_limit`` (:data:`PLAN_STATUSES`);
    the others stay inside the search (``node_limit``: HiGHS handed the MIP to SCIP; ``cutoff``:
    no solution below the incumbent)."""

    OPTIMAL = "optimal"
    TIME_LIMIT = "time_limit"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    NODE_LIMIT = "node_limit"
    CUTOFF = "cutoff"
    INTERRUPTED = "interrupted"
    ERROR = "error"


PLAN_STATUSES: tuple[Status, ...] = (Status.OPTIMAL, Status.TIME_LIMIT)


class PrefillMode(StrEnum):
    """Where a product's prefill runs: inside a flat decode headroom, colocated in the decode
    steps, or on a separate pool; ``auto`` lets the MIP choose between colocated and pool."""

    HEADROOM = "headroom"
    COLOCATED = "colocated"
    POOL = "pool"
    AUTO = "auto"


class Alternatives(StrEnum):
    """Which comparisons a plan searches besides its own: ``none``; ``default``, every one but
    those of a large request mix over a long horizon (each as long a search as the plan's own: its
    GPU types are listed by lower bound, its prefill modes not priced); ``all``, every one."""

    NONE = "none"
    DEFAULT = "default"
    ALL = "all"


class LeftOut(StrEnum):
    """Why a GPU type of a long request mix has no runner-up listed, only a lower bound on its cost:
    its bound is at least the cost of the cheapest types found (``outranked``), or the plan did
    not search the mix's runner-ups (``not_searched``: :attr:`Alternatives.DEFAULT`)."""

    OUTRANKED = "outranked"
    NOT_SEARCHED = "not_searched"


class BatchLimit(StrEnum):
    """What stops a configuration's batch from growing."""

    PER_USER_SPEED = "per_user_speed"
    MEMORY = "memory"
    BATCH_OPTIONS = "batch_options"
    MAX_TTFT = "max_ttft_ms"
    RANK_ROUNDING = "rank_rounding"  # larger feasible batches add a sequence to every attention rank or micro-batch
