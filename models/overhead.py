"""Fixed time per decode step that does not depend on bytes moved or FLOPs done.

    overhead = step_overhead + num_layers x layer_overhead

``step_overhead`` covers scheduling, input preparation and sampling; ``layer_overhead`` the
ramp-up and tail of the kernels each layer launches. Both come per GPU family from
:mod:`fleetplan.models.physics`. Neither shrinks with tensor parallelism, which is why small
per-GPU weight shards (TP 4-8) run well below the bandwidth roofline.
"""

from __future__ import annotations

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.physics import Physics


def step_overhead_s(llm: LLM, gpu: GPU, physics: Physics) -> float:
    """Fixed seconds per decode step of ``llm`` on ``gpu``."""
    fam = physics.family(gpu.family)
    return fam.step_overhead_s + llm.num_layers * fam.layer_overhead_s
