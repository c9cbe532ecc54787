"""The monthly budget: checked against the plan's total, and when it cannot be met, what would
make it fit (API share or per-user speed).

The budget is not a row of the MIP; this module never changes a plan, it only accepts it or explains the refusal."""

from __future__ import annotations

import math
from typing import Callable

from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.defaults import BUDGET_CHECK_GAP, MONEY_TOLERANCE_USD
from fleetplan.optimizer.common.errors import InfeasibleError
from fleetplan.optimizer.traffic.scenario import Scenario
from fleetplan.optimizer.mip.solution import Plan

# the cost of the cheapest plan of a scenario found by a deadline (inf when none): the planner
# itself, passed in by :func:`fleetplan.optimizer.plan.make_plan`
Cheapest = Callable[[Scenario, Deadline], float]


def apply_budget(plan: Plan, original: Scenario, cheapest: Cheapest, with_api: bool, deadline: Deadline) -> None:
    """The budget is not a row of the MIP: the objective is the monthly cost, so the cheapest plan
    meets the budget if any plan does. Raise, with what would make it fit, when it does not."""
    budget = plan.problem.monthly_budget_usd
    total = plan.monthly_cost_usd
    if budget is None or total <= budget + MONEY_TOLERANCE_USD:
        return
    who = ", ".join(p.name for p in original.products)
    res = plan.solve_result
    if not res.optimal:
        bound = total * (1 - (res.mip_gap or 0.0))
        head = (f"limits.monthly_budget_usd: no plan within the budget of ${budget:,.0f} found before the time limit: "
                f"the best found for {who} costs ${total:,.0f} and none costs less than ${bound:,.0f}")
    else:
        head = (f"limits.monthly_budget_usd: infeasible: the cheapest plan for {who} costs ${total:,.0f} a month, "
                f"${total - budget:,.0f} over the budget of ${budget:,.0f}")
    raise InfeasibleError(head + "; " + budget_relief(original, cheapest, with_api, deadline))


def budget_relief(scenario: Scenario, cheapest: Cheapest, with_api: bool = True, deadline: Deadline | None = None) -> str:
    """What a budget that cannot be met costs in API share or in per-user speed: the cheapest
    plan when products with a capped API may send it everything, and the largest common factor
    on every product's ``min_tokens_per_s_per_user`` whose cheapest plan fits the budget
    (bisection to 1%, stopped at the deadline with the best factor found so far)."""
    budget = scenario.limits.monthly_budget_usd
    assert budget is not None
    deadline = deadline or Deadline(at=None)
    # a search for what fits, not a proof: each plan to 0.1% within its share of the deadline;
    # a plan found that fits is a witness whatever its gap
    opts = scenario.options
    quick = opts.model_copy(update={"mip_rel_gap": max(opts.mip_rel_gap, BUDGET_CHECK_GAP)})
    calls = [9]  # plans this search may still run (two ends and about seven bisection steps)

    def each() -> Deadline:
        calls[0] = max(1, calls[0] - 1)
        return deadline.share(1.0 / (calls[0] + 1))
    free = scenario.model_copy(update={"limits": scenario.limits.model_copy(update={"monthly_budget_usd": None}),
                                       "options": quick})
    out: list[str] = []
    capped = [p for p in scenario.products if p.api is not None and p.api.max_fraction < 1.0] if with_api else []
    if capped:
        names = {p.name for p in capped}
        products = [p.model_copy(update={"api": p.api.model_copy(update={"max_fraction": 1.0})}) if p.name in names
                    else p for p in scenario.products]
        cost = cheapest(free.model_copy(update={"products": products}), each())
        verdict = "fits" if cost <= budget else "still does not fit"
        out.append(f"with api.max_fraction 1 for {', '.join(sorted(names))} a plan costs ${cost:,.0f} ({verdict})")

    def slower(f: float) -> float:
        products = [p.model_copy(update={"min_tokens_per_s_per_user": p.min_tokens_per_s_per_user * f})
                    for p in scenario.products]
        return cheapest(free.model_copy(update={"products": products}), each())

    lo, hi = 0.2, 1.0
    cost_lo = slower(lo)
    if cost_lo > budget:
        out.append(f"even at {lo:.0%} of every min_tokens_per_s_per_user no plan found costs less than ${cost_lo:,.0f}")
    else:
        while hi - lo > 0.01:
            if deadline.expired:
                deadline.note("budget relief search")
                out.append(f"(search stopped at the time limit: the factor is between {lo:.2f} and {hi:.2f})")
                break
            mid = round((lo + hi) / 2, 4)
            cost = slower(mid)
            if cost <= budget:
                lo, cost_lo = mid, cost
            else:
                hi = mid
        f = math.floor(lo * 100) / 100
        out.append(f"it fits (${cost_lo:,.0f}) with every min_tokens_per_s_per_user at {f:.2f}x its target ("
                   + ", ".join(f"{p.name} {p.min_tokens_per_s_per_user * f:.3g}" for p in scenario.products[:3])
                   + (", ..." if len(scenario.products) > 3 else "") + " tokens/s)")
    return "; ".join(out)
