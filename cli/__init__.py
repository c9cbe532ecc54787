"""fleetplan: the cheapest GPU fleet (and API share) that serves an LLM workload at a target speed.

Pipeline: ``fleetplan.catalogs`` (data) -> ``fleetplan.models`` (roofline) ->
``fleetplan.optimizer`` (candidates, MIP, solve, results) -> ``fleetplan.main`` (CLI).
"""

__version__ = "0.1.0"
