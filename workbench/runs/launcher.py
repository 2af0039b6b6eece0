"""Launch a real training run through the ``deepspeed`` launcher or ``torchrun``, without blocking the caller.

Three steps, one module each:

* :mod:`workbench.runs.prepare` — validate the specs and write the run directory (``run.json``, ``ds_config.json``,
  ``megatron_args.json``, ``launch.sh`` from the export's script builders, ``hostfile``); nothing starts.
* :mod:`workbench.runs.processes` — start ``launch.sh`` in a session of its own, tied to its owner (the ranks die
  within about a second when the launching process dies, and record why), signal only the run's own processes.
* :mod:`workbench.runs.watch` — the :class:`Run` handle: tail the metrics into the run store, classify the end,
  clean up.

``launch(model, cluster, plan, steps=...)`` is the three in a row; ``prepare`` + ``start`` split it (inspect or edit
the files before starting). A new training path (an engine, a model source) adds its checks and files to
:mod:`workbench.runs.prepare` and its loop to ``workbench/runs/train.py``; nothing here changes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from workbench.runs.prepare import (CHECKOUT_ROOT, CPU_MEMORY_NOT_COMPARABLE, LAUNCHER_PROGRAMS,  # noqa: F401
                                    LAUNCHERS, TRAIN_SCRIPT, TRAINERS, PreparedRun, check_ds_config,
                                    check_launchable, cuda_available, default_runs_dir, new_run_id, predicted_numbers,
                                    prepare, run_launcher, run_stack)
from workbench.runs.processes import group_members, spawn  # noqa: F401
from workbench.runs.specio import specs_to_dict
from workbench.runs.store import RunStore
from workbench.runs.watch import (MetricsTail, RankReports, Run, classify_exit, losses_of,  # noqa: F401
                                  measured_numbers)
from workbench.specs import ClusterSpec, ModelSpec, ParallelPlan, check_float


def launch(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, steps: int = 10, data="synthetic",
           nproc: Optional[int] = None, store: Optional[RunStore] = None, run_dir=None,
           ds_options: Optional[dict] = None, ds_config: Optional[dict] = None, launcher: Optional[str] = None,
           seed: int = 1234, lr: float = 1e-3, clip_grad: float = 1.0, torch_adam: bool = True,
           timeout_seconds: Optional[float] = None, memory_limit_bytes: Optional[int] = None,
           hosts: Optional[list] = None, master_port: Optional[int] = None, env: Optional[dict] = None,
           trainer: str = "engine") -> Run:
    """Validate, write the run directory, start the launcher in the background, return the :class:`Run`.

    ``ds_options`` (``DeepSpeedOptions`` fields) go to :func:`workbench.configs.deepspeed.build_ds_config`, after
    ``lr``, ``train_iters=steps``, one warm-up step, ``clip=clip_grad``; ``torch_adam`` selects torch's Adam (no op
    build; not with optimizer offload, which needs DeepSpeedCPUAdam); ``ds_config`` replaces the built config entirely
    (e.g. an imported one). Dropout comes from the model spec (``hidden_dropout``, ``attention_dropout``).
    ``launcher`` defaults to the one ``workbench export launch`` writes for the plan
    (:func:`workbench.runs.prepare.run_launcher`: ``deepspeed`` for engine deepspeed, ``torchrun`` for megatron and
    the hybrid megatron-deepspeed). ``hosts``
    (``["node1 slots=8", ...]`` or names, one per node) runs multi-node through the scripts the export writes
    (:func:`workbench.runs.prepare.launch_files`): the deepspeed launcher's hostfile, or torchrun's c10d
    rendezvous (then ``launch.sh`` must also be started on the other hosts). ``memory_limit_bytes`` caps each
    rank's extra address space (on the CPU a stand-in for device memory). ``trainer='hf'`` trains a transformers
    model through transformers' ``Trainer`` with the Trainer's ``"auto"`` ds_config
    (:func:`workbench.runs.prepare.prepare`). Bad specs raise ``ValueError`` and are
    recorded with status ``invalid``.
    """
    store = store if store is not None else RunStore()
    run_id = new_run_id()
    try:
        if timeout_seconds is not None:  # nan would never stop the run, a negative one stops it at once
            check_float("timeout_seconds", timeout_seconds)
        prepared = prepare(model, cluster, plan, steps=steps, data=data, nproc=nproc, run_dir=run_dir,
                           run_id=run_id, ds_options=ds_options, ds_config=ds_config, launcher=launcher, seed=seed,
                           lr=lr, clip_grad=clip_grad, torch_adam=torch_adam, memory_limit_bytes=memory_limit_bytes,
                           hosts=hosts, master_port=master_port, env=env, trainer=trainer)
    except ValueError as exc:
        rd = Path(run_dir) if run_dir is not None else default_runs_dir() / run_id
        store.create(run_id, specs=specs_to_dict(model, cluster, plan), command="", status="invalid",
                     reason=str(exc), run_dir=str(rd), engine=str(plan.engine),
                     steps=steps if isinstance(steps, int) else 0)
        store.finish(run_id, status="invalid", reason=str(exc))
        raise
    return start(prepared, store=store, timeout_seconds=timeout_seconds)


def start(prepared: PreparedRun, *, store: RunStore, timeout_seconds: Optional[float] = None) -> Run:
    """Start a prepared run's ``launch.sh`` (:func:`workbench.runs.processes.spawn`), record it ``running`` and
    return the watched :class:`Run`."""
    log_path = prepared.run_dir / "log.txt"
    process, token = spawn(prepared.script, env=prepared.env, cwd=CHECKOUT_ROOT, log_path=log_path,
                           run_id=prepared.run_id, store_path=store.path)
    try:
        store.create(prepared.run_id, specs=prepared.specs, command=prepared.command, status="running",
                     predicted=prepared.predicted, log_path=str(log_path), run_dir=str(prepared.run_dir),
                     engine=prepared.engine, steps=prepared.steps, pgid=process.pid, token=token,
                     master=f"{prepared.master_addr}:{prepared.master_port}")
    except BaseException:
        from workbench.runs.processes import kill_run

        kill_run(token)
        raise
    return Run(run_id=prepared.run_id, run_dir=prepared.run_dir, store=store, process=process,
               world_size=prepared.world_size, steps=prepared.steps, timeout_seconds=timeout_seconds,
               log_path=log_path, token=token, master_addr=prepared.master_addr,
               master_port=prepared.master_port)
