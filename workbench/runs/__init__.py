"""Launch real DeepSpeed, megatron-core and hybrid training runs; follow them; keep them in the run store.

``launch(model, cluster, plan, steps=...)`` → :class:`Run`; :class:`RunStore` lists past runs. Heavy imports
(torch, deepspeed, megatron) happen only in the rank processes and in :mod:`workbench.runs.model`.
"""
from workbench.runs.launcher import PreparedRun, Run, classify_exit, launch, prepare, start
from workbench.runs.store import RunStore

__all__ = ["PreparedRun", "Run", "RunStore", "classify_exit", "launch", "prepare", "start"]
