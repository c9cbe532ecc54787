"""fleetplan: the cheapest GPU fleet (and API share) that serves an LLM workload at a target speed.

Pipeline: ``fleetplan.catalogs`` (data) -> ``fleetplan.models`` (roofline) ->
``fleetplan.optimizer`` (candidates, MIP, solve, results) -> ``fleetplan.main`` (CLI).

The package root only names the version; the command line lives in :mod:`fleetplan.main`.
"""

__version__ = "0.1.0"
