"""Prepare a run: validate the specs and write the run directory, starting nothing.

:func:`prepare` writes::

    run.json           resolved specs and options (what every rank reads)
    ds_config.json     DeepSpeed config (engines deepspeed and megatron-deepspeed), from build_ds_config
    megatron_args.json the megatron-core TransformerConfig arguments, computed once here; the ranks build the
                       model from them (workbench/runs/train.py)
    launch.sh          the exact launcher command (runnable by hand), from the export's script builders
                       (:mod:`workbench.configs.launch`), one node or several
    hostfile           multi-node DeepSpeed runs only (workbench.configs.launch.hostfile)
    deepspeed_env      multi-node DeepSpeed runs: the variables the launcher exports on every node

and returns a :class:`PreparedRun`. Starting it is :mod:`workbench.runs.processes`; following it is
:mod:`workbench.runs.watch`. A new training path adds its checks to :func:`check_launchable` and its files to
:func:`prepare`; a new environment variable goes to :func:`run_env`.
"""
from __future__ import annotations

import datetime
import json
import os
import secrets
import shlex
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from workbench.configs.launch import ALLOC_CONF_VAR, expandable_in_conf, with_expandable_segments
from workbench.runs.specio import specs_to_dict
from workbench.specs import (AttentionImpl, ClusterSpec, Engine, Implementation, ModelSpec, ParallelPlan, Precision,
                             validate)

CHECKOUT_ROOT = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = Path(__file__).resolve().parent / "train.py"
LAUNCHERS = ("deepspeed", "torchrun")
"""The launchers a run starts itself (``export launch --launcher slurm`` writes an sbatch script, submitted by hand)."""
LAUNCHER_PROGRAMS = {"deepspeed": [sys.executable, "-m", "deepspeed.launcher.runner"],
                     "torchrun": [sys.executable, "-m", "torch.distributed.run"]}
"""The launchers as this interpreter's modules (the ``deepspeed`` / ``torchrun`` programs of its environment)."""
LOCAL_MASTER_ADDR = "127.0.0.1"
"""Rendezvous address of a single-node run."""


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover - torch is a requirement of the train extra
        return False


def check_launchable(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, nproc: int, steps: int,
                     on_gpu: bool) -> Optional[dict]:
    """``ValueError`` (fields and numbers named) for specs the launcher cannot run, before anything starts;
    otherwise the megatron-core ``TransformerConfig`` arguments the ranks build the model with (computed here
    once: its refusals, MoE / sequence parallel / context parallel, are part of the checks); None for a
    transformers model (its config.json describes it)."""
    from workbench.runs.model import transformer_config_kwargs

    validate(model, cluster, plan)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an integer >= 1")
    if nproc * cluster.num_nodes != plan.world_size:
        raise ValueError(f"nproc({nproc}) * num_nodes({cluster.num_nodes}) = {nproc * cluster.num_nodes} != "
                         f"plan world_size={plan.world_size}")
    check_pipeline_engine(plan)
    if plan.precision.is_fp8:
        raise ValueError("precision=fp8 trains with Transformer Engine's FP8 layers on an FP8 GPU; the launcher builds "
                         "megatron-core's local layer spec (bf16/fp16/fp32): export the Megatron-LM command "
                         "(`workbench export megatron ... --precision fp8`) to train in FP8")
    if plan.tp_comm_overlap:
        raise ValueError("tp_comm_overlap=True runs Transformer Engine's userbuffer overlap inside TE's linear layers; "
                         "the launcher builds megatron-core's local layer spec, which has none: export the Megatron-LM "
                         "command (`workbench export megatron ... --tp-comm-overlap`) to train with it")
    if not on_gpu and plan.precision is Precision.FP16:
        raise ValueError("precision=fp16 on the CPU: DeepSpeed refuses fp16 on CPUs without AVX-512 FP16; use bf16 "
                         "or fp32")
    if plan.engine is Engine.MEGATRON and not on_gpu and plan.precision is Precision.FP16:
        raise ValueError("precision=fp16 needs a GPU")
    if model.implementation is Implementation.TRANSFORMERS:
        from workbench.hf import run_options

        run_options(model, plan)  # the config is there, unchanged; the stack can run the plan
        return None
    return transformer_config_kwargs(model, plan)


TRAINERS = ("engine", "hf")
"""How a transformers model trains: the DeepSpeed engine driven directly, or transformers' ``Trainer``."""


def check_trainer(trainer: str, model: ModelSpec, plan: ParallelPlan) -> None:
    """``trainer='hf'`` needs a transformers model (``hf:PATH``) under engine 'deepspeed'."""
    if trainer not in TRAINERS:
        raise ValueError(f"trainer={trainer!r} is not one of: {', '.join(TRAINERS)}")
    if trainer == "hf" and model.implementation is not Implementation.TRANSFORMERS:
        raise ValueError(f"trainer='hf' trains a Hugging Face model (--model hf:PATH); model {model.name!r} is "
                         f"implementation '{model.implementation}'")
    if trainer == "hf" and plan.engine is not Engine.DEEPSPEED:
        raise ValueError(f"trainer='hf' runs transformers' Trainer with DeepSpeed: engine must be 'deepspeed', "
                         f"not '{plan.engine}'")


def check_pipeline_engine(plan: ParallelPlan) -> None:
    """Pipelines run with engine 'megatron' (megatron-core's schedules and optimizer) or the hybrid
    'megatron-deepspeed' with ZeRO-0/1 (megatron-core's 1F1B schedule, DeepSpeed ZeRO over each stage's data-parallel
    group); plain DeepSpeed has no pipeline here. ZeRO-2/3 with a pipeline is refused by ``ParallelPlan`` itself
    with DeepSpeed's reason."""
    if plan.pipeline_parallel == 1 or plan.engine is Engine.MEGATRON:
        return
    if plan.engine is Engine.DEEPSPEED:
        raise ValueError(f"pipeline_parallel={plan.pipeline_parallel} with engine='deepspeed': the launcher runs "
                         f"pipelines with engine='megatron' or the hybrid engine='megatron-deepspeed' (tensor x "
                         f"pipeline parallel with ZeRO-1 over data parallel)")
    if plan.virtual_pipeline > 1:
        raise ValueError(f"virtual_pipeline={plan.virtual_pipeline} with engine='{plan.engine}': DeepSpeed's pipeline "
                         f"engine has no interleaved schedule; use engine='megatron' for interleaved 1F1B")


def check_ds_config(config: dict, plan: ParallelPlan, *, on_gpu: bool) -> None:
    """The batch arithmetic DeepSpeed checks at start-up, with the plan's world size (no distributed needed)."""
    mbs = config.get("train_micro_batch_size_per_gpu")
    gas = config.get("gradient_accumulation_steps", 1)
    tbs = config.get("train_batch_size")
    dp = plan.data_parallel
    if mbs is not None and tbs is not None and tbs != mbs * gas * dp:
        raise ValueError(f"ds_config train_batch_size={tbs} != train_micro_batch_size_per_gpu({mbs}) * "
                         f"gradient_accumulation_steps({gas}) * data_parallel({dp}) = {mbs * gas * dp}")
    if not on_gpu and (config.get("fp16") or {}).get("enabled"):
        raise ValueError("ds_config fp16.enabled=true on the CPU: DeepSpeed refuses fp16 here; use bf16 or fp32")
    stage = (config.get("zero_optimization") or {}).get("stage", 0)
    if int(stage) != int(plan.zero_stage):
        raise ValueError(f"ds_config zero_optimization.stage={stage} != plan zero_stage={int(plan.zero_stage)}")


CPU_MEMORY_NOT_COMPARABLE = (
    "CPU run: the memory model predicts GPU bytes (allocator peak plus CUDA context and workspaces), the CPU run "
    "measures each rank's peak resident set size (Python, torch and the framework's libraries included)")


def available_host_bytes() -> Optional[int]:
    """This machine's ``MemAvailable`` (``/proc/meminfo``) in bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_host_memory(model_state_bytes_per_rank: float, *, nproc: int, available_bytes: Optional[int]) -> None:
    """``ValueError`` when the ranks of a CPU run cannot hold their model states in this machine's memory.

    ``model_state_bytes_per_rank`` is the estimate's weights + gradients + optimizer states of one rank (its peak
    stage): every rank of a CPU run keeps at least that in host memory, activations and the framework's libraries
    come on top, so the sum over ``nproc`` ranks is a lower bound on what the run needs. Refused above
    ``available_bytes`` (MemAvailable): such a run would be ended by the kernel's out-of-memory killer after minutes
    of model building. None (unknown) checks nothing."""
    if available_bytes is None or available_bytes <= 0:
        return
    need = float(model_state_bytes_per_rank) * nproc
    if need > available_bytes:
        gib = 2 ** 30
        raise ValueError(
            f"model states of {model_state_bytes_per_rank / gib:,.1f} GiB per rank (weights + gradients + optimizer, "
            f"estimate) x nproc={nproc} = {need / gib:,.1f} GiB exceed this machine's available memory "
            f"{available_bytes / gib:,.1f} GiB: the CPU run would be killed; use a smaller model (--tiny or "
            f"--layers/--hidden/--heads), fewer ranks, or a ZeRO stage that shards the states (--zero 1/2/3)")


def model_state_bytes_per_rank(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> float:
    """Weights + gradients + optimizer states of one rank at the peak stage (:func:`workbench.estimate.estimate`)."""
    from workbench.estimate import estimate

    terms = estimate(model, cluster, plan, checks=False).memory.breakdown
    return float(terms.weights + terms.gradients + terms.optimizer)


def predicted_numbers(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *,
                      on_gpu: bool = True) -> Optional[dict]:
    """``{"per_gpu_peak_bytes", "allocated_bytes", "step_seconds", "memory_comparable", ...}`` from
    :func:`workbench.estimate.estimate` (``step_seconds`` is None while the estimate has no time model);
    ``{"error": ...}`` when the estimate refuses the specs. For a run on the CPU (``on_gpu=False``) the memory
    prediction is kept but marked ``memory_comparable=False`` with ``memory_not_comparable_reason``: it counts GPU
    bytes, the run measures peak RSS."""
    from workbench.estimate import estimate

    try:
        est = estimate(model, cluster, plan, checks=False)  # the record's memory and time; no advisor needed here
    except ValueError as exc:
        return {"per_gpu_peak_bytes": None, "step_seconds": None, "error": str(exc)}
    time_part = getattr(est, "time", None)
    step_seconds = getattr(time_part, "step_seconds", None) if time_part is not None else None
    out = {"per_gpu_peak_bytes": int(est.memory.per_gpu_peak_bytes),
           "allocated_bytes": int(est.memory.per_gpu_peak_bytes - est.memory.breakdown.overhead),
           "step_seconds": float(step_seconds) if step_seconds is not None else None,
           "memory_comparable": bool(on_gpu)}
    if not on_gpu:
        out["memory_not_comparable_reason"] = CPU_MEMORY_NOT_COMPARABLE
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_run_id() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def host_names(hosts, *, nproc: int) -> list[str]:
    """Host names from ``["name", "name slots=N", ...]``; a ``slots`` count must equal ``nproc`` (every node runs
    ``nproc`` ranks)."""
    names = []
    for i, h in enumerate(hosts):
        parts = str(h).split()
        if not parts:
            raise ValueError(f"hosts[{i}]={h!r} is empty")
        for extra in parts[1:]:
            key, _, value = extra.partition("=")
            if key != "slots" or not value.isdigit():
                raise ValueError(f"hosts[{i}]={h!r}: expected 'name' or 'name slots=N'")
            if int(value) != nproc:
                raise ValueError(f"hosts[{i}]={h!r}: slots={value} != nproc={nproc} (every node runs nproc ranks)")
        names.append(parts[0])
    return names


def run_launcher(plan: ParallelPlan, launcher: Optional[str] = None) -> str:
    """The launcher a run starts: ``launcher`` when given, else the export's rule
    (:func:`workbench.configs.launch.default_launcher`: DeepSpeed's for engine deepspeed, torchrun for megatron and
    the hybrid megatron-deepspeed), so that ``launch.sh`` of a run and ``export launch`` for the same plan start the
    same launcher. ``ValueError`` for a launcher a run cannot start (``slurm``: an sbatch script to submit)."""
    from workbench.configs.launch import default_launcher

    if launcher is None:
        return default_launcher(plan.engine)
    if launcher not in LAUNCHERS:
        hint = ("; `workbench export launch --launcher slurm` writes the sbatch script to submit"
                if launcher == "slurm" else "")
        raise ValueError(f"launcher={launcher!r} is not one a run starts (one of: {', '.join(LAUNCHERS)}){hint}")
    return launcher


def launch_files(*, launcher: str, cluster: ClusterSpec, hosts, nproc: int, run_dir: Path, master_port: int,
                 env: dict, run_id: str) -> tuple[dict, list[str], dict]:
    """``(files, argv, env)`` of a run: ``files`` maps ``launch.sh`` (and, for a multi-node DeepSpeed run,
    ``hostfile`` and ``deepspeed_env``) to their text, ``argv`` is the launcher command ``launch.sh`` execs (what
    the store records) and ``env`` the variables it exports. Both come from the export's builders
    (:mod:`workbench.configs.launch`) with this interpreter's launcher and the rank script as the command.

    * one node: ``deepspeed --num_gpus`` or static-rendezvous ``torchrun`` on 127.0.0.1.
    * ``deepspeed``, several nodes: run ``launch.sh`` on the first host; the launcher starts every node's ranks over
      ssh from the hostfile. The environment the ranks need goes to ``deepspeed_env`` (named by ``DS_ENV_FILE``),
      which the launcher exports on every node.
    * ``torchrun``, several nodes: the c10d rendezvous on the first host (``--rdzv_id`` = the run id); ``launch.sh``
      runs on this node and must be started on every other host too (same path, shared file system for the run
      directory).
    """
    from workbench.configs.launch import (checked_hosts, deepspeed_launch_script, hostfile, launch_argv,
                                          torchrun_script)

    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher={launcher!r} is not one of: {', '.join(LAUNCHERS)}")
    names = checked_hosts(cluster, host_names(hosts, nproc=nproc)) if hosts else None
    command = [str(TRAIN_SCRIPT), "--run-dir", str(run_dir)]
    preamble = [f"cd {shlex.quote(str(CHECKOUT_ROOT))}"] + [f"export {k}={shlex.quote(str(v))}"
                                                           for k, v in sorted(env.items())]
    files: dict = {}
    if launcher == "deepspeed":
        hostfile_path = str(run_dir / "hostfile")
        if names:
            env_file = run_dir / "deepspeed_env"
            preamble = preamble + [f"export DS_ENV_FILE={shlex.quote(str(env_file))}"]
            files = {"hostfile": hostfile(cluster, names),
                     "deepspeed_env": "".join(f"{k}={v}\n" for k, v in sorted(env.items()))}
            env = {**env, "DS_ENV_FILE": str(env_file)}
        script = deepspeed_launch_script(cluster, command, hostfile_path=hostfile_path, master_port=master_port,
                                         preamble=preamble, launcher=LAUNCHER_PROGRAMS["deepspeed"],
                                         exec_launcher=True)
        argv = launch_argv("deepspeed", cluster, command, launcher=LAUNCHER_PROGRAMS["deepspeed"],
                           hostfile_path=hostfile_path, master_port=master_port)
    else:
        rdzv = dict(rdzv=bool(names), master_port=master_port,
                    master_addr=names[0] if names else LOCAL_MASTER_ADDR, rdzv_id=run_id)
        script = torchrun_script(cluster, command, preamble=preamble, launcher=LAUNCHER_PROGRAMS["torchrun"],
                                 exec_launcher=True, **rdzv)
        argv = launch_argv("torchrun", cluster, command, launcher=LAUNCHER_PROGRAMS["torchrun"], **rdzv)
    return {"launch.sh": script, **files}, argv, env


def run_stack(model: ModelSpec, plan: ParallelPlan, ds_config: Optional[dict]):
    """(model, plan) with the attention kernel, Adam and gradient-reduce overlap that ``train.py`` really runs:
    megatron-core's local layer spec (``attention='unfused'``; a transformers model keeps its own); for the megatron
    engine torch's Adam and
    ``overlap_grad_reduce=False``; for DeepSpeed the ds_config's ``torch_adam`` and ``overlap_comm`` (DeepSpeed's
    own default when the key is absent: on for ZeRO-3 only)."""
    ran_model = model.replace(attention="unfused") if model.attention is not AttentionImpl.UNFUSED else model
    if model.implementation is Implementation.TRANSFORMERS:  # transformers runs the attn_implementation chosen
        ran_model = model
    if plan.engine is Engine.MEGATRON:
        return ran_model, plan.replace(adam="torch", overlap_comm=False)
    zero = (ds_config or {}).get("zero_optimization") or {}
    torch_adam = bool(((ds_config or {}).get("optimizer") or {}).get("params", {}).get("torch_adam"))
    overlap = zero.get("overlap_comm", int(zero.get("stage", 0) or 0) >= 3)
    return ran_model, plan.replace(adam="torch" if torch_adam else "fused", overlap_comm=bool(overlap))


@dataclass(frozen=True)
class PreparedRun:
    """A written run directory, not started: what :func:`workbench.runs.launch` runs, or a multi-node script to
    inspect."""

    run_id: str
    run_dir: Path
    script: Path
    """``launch.sh``: the exact launcher command, runnable by hand."""
    command: str
    """The launcher command line (what the store records)."""
    env: dict
    """Environment variables ``launch.sh`` exports."""
    predicted: Optional[dict]
    specs: dict
    world_size: int
    steps: int
    engine: str
    hostfile: Optional[Path] = None
    master_addr: str = LOCAL_MASTER_ADDR
    """The rendezvous address the ranks see as ``MASTER_ADDR`` (the first host of a multi-node run)."""
    master_port: int = 0


def prepare(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, *, steps: int = 10, data="synthetic",
            nproc: Optional[int] = None, run_dir=None, run_id: Optional[str] = None,
            ds_options: Optional[dict] = None, ds_config: Optional[dict] = None, launcher: Optional[str] = None,
            seed: int = 1234, lr: float = 1e-3, clip_grad: float = 1.0, torch_adam: bool = True,
            memory_limit_bytes: Optional[int] = None, hosts: Optional[list] = None,
            master_port: Optional[int] = None, env: Optional[dict] = None, trainer: str = "engine") -> PreparedRun:
    """Validate the specs (``ValueError`` naming fields and numbers) and write the run directory without starting
    anything; :func:`workbench.runs.launch` takes the same arguments and starts ``launch.sh``.

    Single node: ``launch.sh`` execs ``deepspeed`` (``--num_gpus``) or ``torchrun`` (``--nproc_per_node``) on
    127.0.0.1; ``launcher`` defaults to the one ``workbench export launch`` writes for the plan
    (:func:`run_launcher`). Several nodes (``hosts``, one per node: ``"name"`` or ``"name slots=N"``): see
    :func:`launch_files`.

    ``trainer``: ``"engine"`` drives ``deepspeed.initialize`` directly; ``"hf"`` (a transformers model, engine
    ``deepspeed``) trains through transformers' ``Trainer`` with ``TrainingArguments(deepspeed=ds_config)``: the
    ds_config is written with ``"auto"`` values (:func:`workbench.configs.deepspeed.hf_trainer_ds_config`) that the
    Trainer resolves from the arguments in ``run.json`` ``options.hf.training_args``.
    """
    from workbench.runs.data import check_vocab, parse_source

    on_gpu = cuda_available()
    nproc = nproc if nproc is not None else cluster.gpus_per_node
    run_id = run_id or new_run_id()
    run_dir = Path(run_dir) if run_dir is not None else default_runs_dir() / run_id
    specs = specs_to_dict(model, cluster, plan)
    launcher = run_launcher(plan, launcher)
    if cluster.num_nodes > 1 and not hosts:
        raise ValueError(f"num_nodes={cluster.num_nodes}: pass hosts=[...] (one per node) for a multi-node run")
    if hosts and len(hosts) != cluster.num_nodes:
        raise ValueError(f"hosts has {len(hosts)} entries but num_nodes={cluster.num_nodes}")
    check_trainer(trainer, model, plan)
    config_kwargs = check_launchable(model, cluster, plan, nproc=nproc, steps=steps, on_gpu=on_gpu)
    if not on_gpu:  # CPU ranks share this machine's memory: refuse what cannot fit before starting anything
        check_host_memory(model_state_bytes_per_rank(model, cluster, plan), nproc=nproc,
                          available_bytes=available_host_bytes())
    source = parse_source(data)
    check_vocab(source, model.vocab_size)
    training_args = None
    resolved_config = ds_config
    if plan.engine is not Engine.MEGATRON:
        from workbench.configs import deepspeed as ds

        options_ = ds.DeepSpeedOptions(**{"lr": lr, "train_iters": steps, "warmup_iters": 1, "clip": clip_grad,
                                          "seed": seed, **(ds_options or {})})
        if ds_config is None:
            build = ds.hf_trainer_ds_config if trainer == "hf" else ds.build_ds_config
            ds_config = build(model, cluster, plan, options=options_)
            if torch_adam and plan.offload_optimizer.value == "none":
                # torch's Adam: no DeepSpeed op to compile (FusedAdam JIT-builds otherwise)
                ds_config["optimizer"].setdefault("params", {})["torch_adam"] = True
        resolved_config = ds_config
        if trainer == "hf":  # what the Trainer will make of the "auto" values, checked before anything starts
            training_args = ds.hf_training_arguments(model, cluster, plan, options=options_)
            resolved_config = ds.resolve_hf_auto(ds_config, training_args, world_size=plan.data_parallel,
                                                 hidden_size=model.hidden_size)
        check_ds_config(resolved_config, plan, on_gpu=on_gpu)
    port = master_port or free_port()
    files, argv, run_env = launch_files(launcher=launcher, cluster=cluster, hosts=hosts, nproc=nproc,
                                        run_dir=run_dir, master_port=port,
                                        env=run_env_for(nproc=nproc, on_gpu=on_gpu, extra=env,
                                                        cpu_adam_threads=cluster.cpu_adam_threads,
                                                        expandable_segments=plan.expandable_segments),
                                        run_id=run_id)
    names = host_names(hosts, nproc=nproc) if hosts else None

    # the stack train.py runs: megatron-core's local layer spec (unfused softmax); without Apex/Transformer Engine,
    # torch's Adam for the megatron engine and no overlapped gradient reduce (megatron-core DDP's default); for
    # DeepSpeed the config's torch_adam and overlap_comm
    ran_model, ran_plan = run_stack(model, plan, resolved_config)
    # ... with the allocator its processes get (PYTORCH_CUDA_ALLOC_CONF as launch.sh exports it)
    ran_plan = ran_plan.replace(expandable_segments=expandable_in_conf(run_env.get(ALLOC_CONF_VAR)))
    # ... on the CPU threads the ranks get (OMP_NUM_THREADS as launch.sh exports it: CPU Adam's threads)
    threads = int(run_env["OMP_NUM_THREADS"]) if str(run_env.get("OMP_NUM_THREADS", "")).isdigit() else 0
    predicted = predicted_numbers(ran_model, cluster.replace(cpu_adam_threads=threads) if threads > 0 else cluster,
                                  ran_plan, on_gpu=on_gpu)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics").mkdir(exist_ok=True)
    options = {"engine": str(plan.engine), "steps": steps,
               "stack": {"attention": str(ran_model.attention), "adam": str(ran_plan.adam),
                         "overlap_comm": ran_plan.overlaps_comm,
                         "expandable_segments": ran_plan.expandable_segments},
               "data": data if isinstance(data, str) else source.kind,
               "seed": seed, "lr": lr, "clip_grad": clip_grad,
               "memory_limit_bytes": memory_limit_bytes, "launcher": launcher, "hosts": names,
               "omp_num_threads": run_env.get("OMP_NUM_THREADS"),
               "pytorch_cuda_alloc_conf": run_env.get(ALLOC_CONF_VAR)}
    if model.implementation is Implementation.TRANSFORMERS:
        from workbench.hf import read_config, run_options

        options["hf"] = run_options(model, plan)
        options["hf"]["trainer"] = trainer
        if training_args is not None:
            options["hf"]["training_args"] = training_args
        # the config as trained, next to the run (the model directory may change later)
        (run_dir / "hf_config.json").write_text(json.dumps(read_config(options["hf"]["path"]), indent=2))
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "run_dir": str(run_dir), "specs": specs,
                                                  "options": options, "predicted": predicted}, indent=2))
    if config_kwargs is not None:
        (run_dir / "megatron_args.json").write_text(json.dumps(config_kwargs, indent=2, default=str))
    if ds_config is not None:
        (run_dir / "ds_config.json").write_text(json.dumps(ds_config, indent=2))
    for name, text in files.items():
        (run_dir / name).write_text(text)
    script = run_dir / "launch.sh"
    script.chmod(0o755)
    return PreparedRun(run_id=run_id, run_dir=run_dir, script=script, command=shlex.join(argv), env=run_env,
                       predicted=predicted, specs=specs, world_size=plan.world_size, steps=steps,
                       engine=str(plan.engine), hostfile=run_dir / "hostfile" if "hostfile" in files else None,
                       master_addr=names[0] if names else LOCAL_MASTER_ADDR, master_port=port)


def default_runs_dir() -> Path:
    from workbench.paths import runs_dir

    return runs_dir()


def run_env_for(*, nproc: int, on_gpu: bool, extra: Optional[dict], cpu_adam_threads: int = 0,
                expandable_segments: bool = False) -> dict:
    """The variables ``launch.sh`` exports: the checkout on ``PYTHONPATH``, unbuffered output, the DeepSpeed op
    cache; NCCL/CUDA settings on a GPU, ``OMP_NUM_THREADS`` (the cluster's ``cpu_adam_threads`` when declared, else
    this environment's, else cores / ranks), ``PYTORCH_CUDA_ALLOC_CONF`` (this environment's, with
    ``expandable_segments:True`` added when the plan asks for it); ``extra`` last."""
    pythonpath = os.pathsep.join(p for p in (str(CHECKOUT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1",
           "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR") or str(_default_extensions_dir())}
    if on_gpu:
        env["NCCL_NVLS_ENABLE"] = os.environ.get("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    # the node's cores shared by its ranks: torchrun otherwise sets OMP_NUM_THREADS=1, which makes DeepSpeed's CPU
    # Adam (optimizer offload) about 3x slower on H200 (3.2 s instead of 1.1 s per step measured)
    env["OMP_NUM_THREADS"] = (str(cpu_adam_threads) if cpu_adam_threads else None) or os.environ.get(
        "OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // nproc))
    conf = os.environ.get(ALLOC_CONF_VAR, "")
    if expandable_segments:
        conf = with_expandable_segments(conf)
    if conf:
        env[ALLOC_CONF_VAR] = conf
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def _default_extensions_dir() -> Path:
    from workbench.paths import data_dir

    return data_dir() / "torch_extensions"
