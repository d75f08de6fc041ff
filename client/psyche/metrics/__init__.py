"""A client's metrics: event sinks that chart (W&B) or print (a status line) what the event log
records, and the optimizer statistics a client may record after a train step.

Sinks plug into :class:`psyche.events.EventLog` (``sinks=[...]``); they see every record the
log writes, file or no file. ``wandb`` is imported only when a :class:`WandbSink` is made.

Imports only ``psyche.events``, ``psyche.distro`` and ``psyche.training`` (for types).
"""

from psyche.metrics.optim_stats import KINDS, optim_stats, param_kind
from psyche.metrics.status import StatusLine, format_eval, format_train
from psyche.metrics.wandb_sink import WandbOptions, WandbSink, choose_mode, wandb_row

__all__ = [
    "KINDS",
    "StatusLine",
    "WandbOptions",
    "WandbSink",
    "choose_mode",
    "format_eval",
    "format_train",
    "optim_stats",
    "param_kind",
    "wandb_row",
]
