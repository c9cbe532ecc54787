"""The value of each binding shared limit: what one more step of it would save a month.

A limit binds when the plan leaves less than one step of it unused: a GPU type's availability
(in total or in one pricing tier) with less than one more instance free (one GPU when GPUs are
bought singly). Its value is measured by planning again with the limit raised by that step
(never from the duals of a MIP, which price nothing once integers are fixed) and taking the
difference of the two monthly costs. The monthly budget never binds a plan that exists: it is
not a row of the MIP, the objective is the cost itself, so raising it changes nothing.

Owns which limits bind and the relaxed scenarios; the planner is passed in (as for the budget in
:mod:`.budget`), so this module solves nothing itself and never changes the plan it reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.defaults import MONEY_TOLERANCE_USD
from fleetplan.optimizer.traffic.scenario import Scenario
from fleetplan.optimizer.traffic.sites import SITE_LIMIT
from fleetplan.optimizer.mip.solution import Plan
from fleetplan.optimizer.explanation.power import site_mw_by_hour, smallest_step_mw
from fleetplan.optimizer.traffic.sites import POWER_STEP_W

# The cheapest plan of a scenario by a deadline: (monthly cost, proven optimal), or None when no
# plan was found (infeasible, or out of time). :func:`fleetplan.optimizer.plan.make_plan` passes it.
Resolve = Callable[[Scenario, Deadline], "tuple[float, bool] | None"]


@dataclass(frozen=True)
class Relaxation:
    """One limit raised by one step: the scenario field, the GPUs added, the new limit, the
    scenario with it, and the GPU type and pricing tier (None: all tiers) it limits."""

    limit: str
    step_gpus: float
    relaxed_to: float
    scenario: Scenario
    gpu: str
    tier: str | None = None
    step_unit: str = "gpus"  # "MW" for a site's power (see :func:`site_relaxations`)


def _raised(scenario: Scenario, gpu: str, tier: str | None, to: int) -> Scenario:
    """``scenario`` with the availability of ``gpu`` (in ``tier``, or in total) set to ``to``."""
    avail = dict(scenario.limits.gpu_availability)
    now = avail[gpu]
    if tier is None and isinstance(now, int):
        avail[gpu] = to
    else:
        avail[gpu] = {**now, (tier or "total"): to}  # type: ignore[dict-item]
    return scenario.model_copy(update={"limits": scenario.limits.model_copy(update={"gpu_availability": avail})})


def every_relaxation(scenario: Scenario) -> list[Relaxation]:
    """Every availability limit of ``scenario`` raised by one step (one instance of the GPU type,
    one GPU without instances), whether or not a plan binds it: the relaxations a plan can list,
    in the order it lists them (scenario order; per GPU type the total first, then each tier)."""
    out: list[Relaxation] = []
    limits = scenario.limits
    totals, tiers = limits.total_availability(), sorted(limits.tier_availability().items())
    for gpu in limits.gpu_availability:
        step = limits.gpus_per_instance(gpu) or 1
        if gpu in totals:
            n = totals[gpu]
            out.append(Relaxation(f"limits.gpu_availability.{gpu}", step, n + step,
                                  _raised(scenario, gpu, None, n + step), gpu))
        for (g, tier), n in tiers:
            if g == gpu:
                out.append(Relaxation(f"limits.gpu_availability.{gpu}.{tier}", step, n + step,
                                      _raised(scenario, gpu, tier, n + step), gpu, tier))
    return out


def binds(plan: Plan, r: Relaxation) -> bool:
    """Whether ``plan`` leaves less than one step of the limit ``r`` raises unused (a GPU type the
    plan does not use binds nothing)."""
    if r.step_unit != "gpus":
        return True  # a site's relaxation is listed only when it binds
    usage = plan.instances.get(r.gpu)
    if usage is None:
        return False
    limit = r.relaxed_to - r.step_gpus
    if r.tier is not None:
        return usage["gpus_by_tier"].get(r.tier, 0) + r.step_gpus > limit
    bought = (usage["instances"] or 0) * r.step_gpus if usage["gpus_per_instance"] else usage["gpus"]
    return bought + r.step_gpus > limit


def binding_relaxations(plan: Plan, scenario: Scenario) -> list[Relaxation]:
    """Every availability limit the plan leaves less than one step of, each raised by one step
    (see :func:`every_relaxation` for the step and the order)."""
    return [r for r in every_relaxation(scenario) if binds(plan, r)] + site_relaxations(plan, scenario)


def value_of(plan: Plan, r: Relaxation, resolve: Resolve, within: Deadline) -> dict[str, Any]:
    """One binding limit as plan JSON: the limit, its step, what the plan costs with it raised and
    the monthly saving (None when the re-plan found nothing in its time); ``proven`` when both
    plans are proven optimal, so the saving is exact up to the gap."""
    found = resolve(r.scenario, within)
    base = plan.monthly_cost_usd
    entry: dict[str, Any] = {"limit": r.limit, "step": r.step_gpus, "step_unit": r.step_unit, "relaxed_to": r.relaxed_to,
                             "value_usd_per_month": None, "relaxed_monthly_cost_usd": None, "proven": False}
    if found is None:
        within.note(f"value of {r.limit}")
        return entry
    cost, optimal = found
    saving = base - cost
    entry["value_usd_per_month"] = round(saving if saving > MONEY_TOLERANCE_USD else 0.0, 2)
    entry["relaxed_monthly_cost_usd"] = round(cost, 2)
    entry["proven"] = bool(optimal and plan.solve_result.optimal)
    return entry


def binding_limits(plan: Plan, scenario: Scenario, resolve: Resolve, deadline: Deadline) -> list[dict[str, Any]]:
    """The value of every binding limit of ``plan`` (see the module docstring), each re-plan
    within an equal share of what is left of ``deadline``."""
    relaxations = binding_relaxations(plan, scenario)
    out = []
    for i, r in enumerate(relaxations):
        out.append(value_of(plan, r, resolve, deadline.share(1.0 / (len(relaxations) - i))))
    return out


def binding_sentence(entry: dict[str, Any]) -> str:
    """One binding limit in words: "8 more h200-sxm GPUs would save $X a month", or for a site's
    power (a limit named ``power of site <name>``) "1 more MW (limit 0.1 -> 1.1 MW) would save $X a month"."""
    if str(entry["limit"]).startswith(SITE_LIMIT):
        head = f"{entry['step']:g} more MW (limit {entry['relaxed_to'] - entry['step']:g} -> {entry['relaxed_to']:g} MW)"
        if entry["value_usd_per_month"] is None:
            return f"{head}: not valued (time limit)"
        proven = "" if entry["proven"] else " (not proven optimal)"
        return f"{head} would save ${entry['value_usd_per_month']:,.0f} a month{proven}"
    parts = entry["limit"].split(".")
    what = parts[2] + (f" {parts[3]}" if len(parts) > 3 else "")
    head = f"{entry['step']} more {what} GPUs (limit {entry['relaxed_to'] - entry['step']} -> {entry['relaxed_to']})"
    if entry["value_usd_per_month"] is None:
        return f"{head}: not valued (time limit)"
    proven = "" if entry["proven"] else " (not proven optimal)"
    return f"{head} would save ${entry['value_usd_per_month']:,.0f} a month{proven}"


def site_relaxations(plan: Plan, scenario: Scenario) -> list[Relaxation]:
    """Each site whose limit binds the plan (some hour leaves less than its smallest replica's
    full-load draw free), raised by one MW (:data:`fleetplan.optimizer.traffic.sites.POWER_STEP_W`): the relaxations
    this module values by planning again."""
    out = []
    step = POWER_STEP_W / 1e6
    for i, s in enumerate(scenario.sites):
        row, least = site_mw_by_hour(plan, s), smallest_step_mw(plan, s)
        if least <= 0 or all(mw + least <= s.limit_mw + 1e-9 for mw in row):
            continue
        sites = list(scenario.sites)
        sites[i] = s.model_copy(update={"limit_mw": s.limit_mw + step})
        out.append(Relaxation(f"{SITE_LIMIT}{s.name}", step, s.limit_mw + step,
                              scenario.model_copy(update={"sites": sites}), "", None, "MW"))
    return out
