"""Stage 1, traffic: what must be served, read from the user's files.

In: a scenario file or dict, request-size histograms, request traces (CSV), hourly profiles.
Out: a validated :class:`~fleetplan.optimizer.traffic.scenario.Scenario`, hourly demand and request
mixes per product, arrival variability, and seeded synthetic traces.
Knows nothing of GPUs' performance or the MIP: imports :mod:`fleetplan.catalogs` and :mod:`..common` only.
"""
