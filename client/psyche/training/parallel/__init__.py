"""Data and tensor parallelism inside one client: N·M devices, one payload, one set of weights.

Modules, one job each: `layout` (the (dp, tp) grid of ranks and who trains which micro-batch),
`tp_plan` (torch TP plan for Llama models), `replica` (a worker's compute copy of the model),
`step` (the collective protocol of one train step, run by every rank), `rendezvous` (joining the
process group), `worker` (a worker process's main loop), `group` (rank 0's handle on its
workers) and `trainer` (`ParallelTrainer`, and `build_trainer`, which returns a plain `Trainer`
for DP=TP=1). The design and its guarantees are in `trainer`'s docstring.
"""

from psyche.training.parallel.layout import ParallelLayout, device_for_rank
from psyche.training.parallel.tp_plan import check_tp_compatible, llama_tp_plan
from psyche.training.parallel.trainer import ParallelTrainer, build_trainer

__all__ = [
    "ParallelLayout",
    "ParallelTrainer",
    "build_trainer",
    "check_tp_compatible",
    "device_for_rank",
    "llama_tp_plan",
]
