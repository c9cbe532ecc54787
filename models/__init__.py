"""Performance models: pure functions of (model, GPU, shape) with no solver and no I/O.

- :mod:`fleetplan.models.presets`: the modelling assumptions (``seed`` and ``default``);
- :mod:`fleetplan.models.memory`: weight and KV-cache bytes derived from architecture facts;
- :mod:`fleetplan.models.parallel`: which tensor-parallel degrees a model and GPU allow;
- :mod:`fleetplan.models.layout`: replicas beyond one TP group (pipeline stages, expert and
  attention-data parallelism): their rules, GPUs and nodes, memory per GPU and step terms;
- :mod:`fleetplan.models.roofline`: the decode-step roofline (time, bound, tokens/s, memory);
- :mod:`fleetplan.models.prefill`: prefill FLOPs per request (linear layers and attention);
- :mod:`fleetplan.models.ttft`: time to first token per prefill mode, with its queueing allowance;
- :mod:`fleetplan.models.physics`: the default preset's physical parameters, in one place;
- :mod:`fleetplan.models.communication`, :mod:`~fleetplan.models.overhead`, :mod:`~fleetplan.models.moe`,
  :mod:`~fleetplan.models.interference`: the default preset's terms beyond first order;
- :mod:`fleetplan.models.measurements`, :mod:`~fleetplan.models.validation`,
  :mod:`~fleetplan.models.calibration`: measured benchmarks, error statistics and fitted profiles;
- :mod:`fleetplan.models.hierarchy`: the calibration's estimator (offsets per level, shrunk by
  cross-validation);
- :mod:`fleetplan.models.profile`: the calibration profile's schema, for writing and reading it.
"""

from fleetplan.models.presets import PRESETS, Preset, get_preset
from fleetplan.models.roofline import StepEstimate, decode_step

__all__ = ["PRESETS", "Preset", "StepEstimate", "decode_step", "get_preset"]
