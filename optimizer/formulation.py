"""The fleet-sizing MIP in Pyomo, one function per business rule.

Sets
    P           products
    C           candidate replica configurations (each belongs to one product, ``C_p``)
Variables
    use[c]      binary: configuration c is the one product p runs
    replicas[c] integer: replicas of configuration c
Objective
    minimise  sum_c  monthly_cost_per_replica_usd[c] * replicas[c]       (USD per month)

Names follow ``{entity}-{rule}-{bound}`` once exported (see :mod:`fleetplan.optimizer.linear`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyomo.core import Binary, ConcreteModel, Constraint, NonNegativeIntegers, Objective, Set, Var, minimize

from fleetplan.optimizer.candidates import Candidate


@dataclass(frozen=True)
class FleetProblem:
    """Everything the MIP needs: per product, its demand and its candidate configurations."""

    demand_tokens_per_s: dict[str, float]
    candidates: dict[str, list[Candidate]]

    @property
    def products(self) -> list[str]:
        """Product names in scenario order."""
        return list(self.demand_tokens_per_s)

    def all_candidates(self) -> list[Candidate]:
        """Every candidate, product by product."""
        return [c for p in self.products for c in self.candidates[p]]

    def replica_upper_bound(self, c: Candidate) -> int:
        """Replicas of ``c`` that alone meet its product's demand: more are never useful."""
        demand = self.demand_tokens_per_s[c.product]
        return max(0, math.ceil(demand / c.usable_tokens_per_s - 1e-9))


def define_sets(m: ConcreteModel, prob: FleetProblem) -> None:
    """P (products) and C (candidates), both in deterministic order."""
    m.P = Set(initialize=prob.products, ordered=True)
    m.C = Set(initialize=[c.key for c in prob.all_candidates()], ordered=True)
    m.C_of = {p: [c.key for c in prob.candidates[p]] for p in prob.products}
    m.cand = {c.key: c for c in prob.all_candidates()}


def define_variables(m: ConcreteModel, prob: FleetProblem) -> None:
    """use[c] in {0,1}; 0 <= replicas[c] <= replicas that alone meet the demand (integer)."""
    m.use = Var(m.C, domain=Binary)
    m.replicas = Var(m.C, domain=NonNegativeIntegers, bounds=lambda _m, k: (0, prob.replica_upper_bound(m.cand[k])))


def define_one_configuration_per_product(m: ConcreteModel, prob: FleetProblem) -> None:
    """Each product runs exactly one replica configuration: sum_{c in C_p} use[c] = 1."""
    if not m.P:
        return
    m.one_configuration_per_product = Constraint(m.P, rule=lambda m, p: sum(m.use[k] for k in m.C_of[p]) == 1)


def define_replicas_need_configuration(m: ConcreteModel, prob: FleetProblem) -> None:
    """Replicas only of the chosen configuration: replicas[c] <= ub[c] * use[c]."""
    if not m.C:
        return
    m.replicas_need_configuration = Constraint(
        m.C, rule=lambda m, k: m.replicas[k] <= prob.replica_upper_bound(m.cand[k]) * m.use[k]
    )


def define_throughput_meets_demand(m: ConcreteModel, prob: FleetProblem) -> None:
    """Usable decode throughput covers peak demand (tokens/s):
    sum_{c in C_p} usable_tokens_per_s[c] * replicas[c] >= demand_tokens_per_s[p]."""
    if not m.P:
        return
    m.throughput_meets_demand = Constraint(
        m.P,
        rule=lambda m, p: sum(m.cand[k].usable_tokens_per_s * m.replicas[k] for k in m.C_of[p])
        >= prob.demand_tokens_per_s[p],
    )


def define_objective(m: ConcreteModel, prob: FleetProblem) -> None:
    """Minimise the monthly fleet cost in USD."""
    m.monthly_cost_usd = Objective(
        expr=sum(m.cand[k].monthly_cost_per_replica_usd * m.replicas[k] for k in m.C), sense=minimize
    )


def build_model(prob: FleetProblem) -> ConcreteModel:
    """The Pyomo model of ``prob``: the constraint families above, in order."""
    m = ConcreteModel(name="fleetplan")
    define_sets(m, prob)
    define_variables(m, prob)
    define_one_configuration_per_product(m, prob)
    define_replicas_need_configuration(m, prob)
    define_throughput_meets_demand(m, prob)
    define_objective(m, prob)
    return m
