"""Shared vocabulary of the planner, used by every stage and owned by none.

Holds the policy numbers with their reasons (:mod:`.defaults`), the closed vocabularies
(:mod:`.enums`), the two ways a plan can fail (:mod:`.errors`) and number formatting (:mod:`.text`).
In: nothing of the planner. Out: constants, enums, exception types and formatters.
Imports no other package of :mod:`fleetplan.optimizer`.
"""
