"""Launch scripts: DeepSpeed's launcher with a hostfile, ``torchrun`` on every node, and a SLURM batch script.

Each function returns the text of a file; ``preamble`` lines (variable settings) go before the launch line. ``command`` is the training program and its arguments, e.g.
``["train.py", "--deepspeed_config", "ds_config.json"]`` or ``["$MEGATRON_LM/pretrain_gpt.py", *megatron_args(...)]``.
"""
from __future__ import annotations

import shlex
from typing import Optional, Sequence

from workbench.configs.megatron import format_flags
from workbench.specs import ClusterSpec, check_spec_types

_NCCL_LINES = [
    "# export NCCL_DEBUG=INFO            # uncomment to see NCCL's topology and errors "
    "(the DeepSpeed-vs-Megatron practitioner's guide §5.1)",
    "# export NCCL_IB_HCA=mlx5          # uncomment and set to pin the InfiniBand adapters",
    "# export NCCL_SOCKET_IFNAME=eth0   # uncomment and set to the interface that reaches the other nodes",
]


ALLOC_CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"
"""PyTorch's caching-allocator settings variable (``key:value`` pairs separated by commas)."""


def alloc_conf_options(conf) -> dict:
    """``PYTORCH_CUDA_ALLOC_CONF``'s ``key:value`` pairs as a dict (keys as written; empty for ``None``/``""``)."""
    out = {}
    for part in str(conf or "").split(","):
        if part.strip():
            key, _, value = part.partition(":")
            out[key.strip()] = value.strip()
    return out


def expandable_in_conf(conf) -> bool:
    """Whether a ``PYTORCH_CUDA_ALLOC_CONF`` value turns expandable segments on (``expandable_segments:True``)."""
    return alloc_conf_options(conf).get("expandable_segments", "").lower() == "true"


def with_expandable_segments(conf) -> str:
    """``conf`` (a ``PYTORCH_CUDA_ALLOC_CONF`` value, maybe empty) with ``expandable_segments:True`` set, its other
    settings kept."""
    options = alloc_conf_options(conf)
    options["expandable_segments"] = "True"
    return ",".join(f"{k}:{v}" for k, v in options.items())


def allocator_lines(plan) -> list[str]:
    """The launch-script line that gives the plan's training processes its allocator
    (:attr:`workbench.specs.ParallelPlan.expandable_segments`); none for PyTorch's default allocator."""
    if not plan.expandable_segments:
        return []
    return [f"export {ALLOC_CONF_VAR}=expandable_segments:True  # the plan's allocator: segments grow in place, "
            "less reserved above the allocated peak"]


def default_launcher(engine) -> str:
    """The launcher a plan starts under unless told otherwise (``export launch`` without ``--launcher``,
    ``workbench run`` and ``launch()`` without ``launcher=``): DeepSpeed's for engine deepspeed, else torchrun
    (``engine``: an :class:`~workbench.specs.Engine` or its name)."""
    from workbench.specs import Engine

    return "deepspeed" if str(engine) == str(Engine.DEEPSPEED) else "torchrun"


def default_hosts(cluster: ClusterSpec) -> list[str]:
    return [f"node{i}" for i in range(cluster.num_nodes)]


MAX_HOSTFILE_NODES = 65_536
"""Largest hostfile written (one line per node)."""


def checked_hosts(cluster: ClusterSpec, hosts: Optional[Sequence[str]]) -> list[str]:
    """The host names (``node0..`` when not given), one per node, distinct, usable in a hostfile."""
    check_spec_types(cluster=cluster)
    if cluster.num_nodes > MAX_HOSTFILE_NODES:
        raise ValueError(f"num_nodes={cluster.num_nodes:,} is more than a hostfile is written for "
                         f"({MAX_HOSTFILE_NODES:,} lines at most); use torchrun or slurm launch scripts")
    if isinstance(hosts, str):
        raise ValueError(f"hosts={hosts!r:.60} must be a list of host names, not one string")
    hosts = list(hosts) if hosts is not None else default_hosts(cluster)
    if any(not isinstance(h, str) for h in hosts):
        raise ValueError(f"hosts must be strings (got {', '.join(type(h).__name__ for h in hosts[:3])})")
    if len(hosts) != cluster.num_nodes:
        raise ValueError(f"hosts has {len(hosts)} names but num_nodes={cluster.num_nodes}")
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"hosts repeats a name: {', '.join(hosts)}")
    for h in hosts:
        if not h or any(c.isspace() for c in h) or h.startswith("#"):
            raise ValueError(f"host name {h!r} is not usable in a hostfile")
    return hosts


def hostfile(cluster: ClusterSpec, hosts: Optional[Sequence[str]] = None) -> str:
    """DeepSpeed/MPI hostfile, one ``host slots=N`` line per node (``N`` = GPUs per node)."""
    names = checked_hosts(cluster, hosts)
    lines = []
    if hosts is None:
        lines.append("# FILL IN: replace node0.. with host names reachable by passwordless ssh")
    lines += [f"{h} slots={cluster.gpus_per_node}" for h in names]
    return "\n".join(lines) + "\n"


def _command_lines(command: Sequence[str]) -> list[str]:
    if not command:
        raise ValueError("command is empty: give the training script and its arguments")
    flags = format_flags(list(command))
    return [line + " \\" for line in flags[:-1]] + [flags[-1]]


def _header(title: str) -> list[str]:
    return ["#!/usr/bin/env bash", f"# {title}", "set -euo pipefail"]


def _launcher_words(launcher: Sequence[str], exec_launcher: bool) -> str:
    """The launcher program (``deepspeed``, ``torchrun``, or e.g. ``python -m torch.distributed.run``), prefixed
    with ``exec`` when the script's shell should become the launcher (one process to signal)."""
    if not launcher:
        raise ValueError("launcher is empty: give the launcher program, e.g. ['torchrun']")
    words = " ".join(shlex.quote(str(w)) for w in launcher)
    return ("exec " if exec_launcher else "") + words


def _deepspeed_words(cluster: ClusterSpec, *, hostfile_path: str, master_port: int) -> list[tuple[str, str]]:
    """The deepspeed launcher's arguments as ``(as written in the script, value it has)`` pairs."""
    words = []
    if cluster.num_nodes > 1:
        words += [("--hostfile", "--hostfile"), (shlex.quote(hostfile_path), hostfile_path),
                  ("--num_nodes", "--num_nodes"), (str(cluster.num_nodes), str(cluster.num_nodes))]
    words += [("--num_gpus", "--num_gpus"), (str(cluster.gpus_per_node), str(cluster.gpus_per_node)),
              ("--master_port", "--master_port"), (str(master_port), str(master_port))]
    return words


def _torchrun_words(cluster: ClusterSpec, *, rdzv: bool, master_port: int, master_addr: Optional[str],
                    rdzv_id: str) -> list[tuple[str, str]]:
    """torchrun's arguments as ``(as written in the script, value with the script's defaults)`` pairs; the script
    reads ``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK`` and ``RDZV_ID`` from its variables."""
    addr = master_addr if master_addr is not None else "localhost"
    words = [("--nnodes", "--nnodes"), (str(cluster.num_nodes), str(cluster.num_nodes)),
             ("--nproc_per_node", "--nproc_per_node"), (str(cluster.gpus_per_node), str(cluster.gpus_per_node))]
    if rdzv:
        words += [("--rdzv_id", "--rdzv_id"), (f'"${{RDZV_ID:-{shlex.quote(rdzv_id)}}}"', rdzv_id),
                  ("--rdzv_backend", "--rdzv_backend"), ("c10d", "c10d"),
                  ("--rdzv_endpoint", "--rdzv_endpoint"), ('"$MASTER_ADDR:$MASTER_PORT"', f"{addr}:{master_port}")]
    else:
        words += [("--node_rank", "--node_rank"), ('"$NODE_RANK"', "0"),
                  ("--master_addr", "--master_addr"), ('"$MASTER_ADDR"', addr),
                  ("--master_port", "--master_port"), ('"$MASTER_PORT"', str(master_port))]
    return words


def launch_argv(kind: str, cluster: ClusterSpec, command: Sequence[str], *, launcher: Sequence[str],
                hostfile_path: str = "hostfile", master_port: int = 29500, rdzv: bool = False,
                master_addr: Optional[str] = None, rdzv_id: str = "workbench") -> list[str]:
    """The command line the script of :func:`deepspeed_launch_script` (``kind="deepspeed"``) or
    :func:`torchrun_script` (``kind="torchrun"``) runs, with the script's defaults filled in (what a run records)."""
    if kind == "deepspeed":
        words = _deepspeed_words(cluster, hostfile_path=hostfile_path, master_port=master_port)
    elif kind == "torchrun":
        words = _torchrun_words(cluster, rdzv=rdzv, master_port=master_port, master_addr=master_addr,
                                rdzv_id=rdzv_id)
    else:
        raise ValueError(f"launcher kind={kind!r} is not one of: deepspeed, torchrun")
    return [str(w) for w in launcher] + [value for _, value in words] + [str(c) for c in command]


def deepspeed_launch_script(cluster: ClusterSpec, command: Sequence[str], *, hostfile_path: str = "hostfile",
                            master_port: int = 29500, preamble: Sequence[str] = (),
                            launcher: Sequence[str] = ("deepspeed",), exec_launcher: bool = False) -> str:
    """``deepspeed`` launcher script: run once on the first node; it starts every rank over ssh from the hostfile
    (a single node needs no hostfile). ``launcher`` replaces the ``deepspeed`` program (e.g. a virtualenv's
    ``python -m deepspeed.launcher.runner``); ``exec_launcher`` makes the shell exec it."""
    check_spec_types(cluster=cluster)
    lines = _header(f"DeepSpeed launcher: {cluster.num_nodes} node(s) x {cluster.gpus_per_node} {cluster.gpu.name}")
    lines += list(preamble) + _NCCL_LINES + [""]
    program = _launcher_words(launcher, exec_launcher)
    if cluster.num_nodes > 1:
        lines.insert(3, f"# Run on the first host of {hostfile_path}; the launcher reaches the others by ssh.")
    words = _deepspeed_words(cluster, hostfile_path=hostfile_path, master_port=master_port)
    launch = " ".join([program] + [text for text, _ in words]) + " \\"
    return "\n".join(lines + [launch] + _command_lines(command)) + "\n"


def torchrun_script(cluster: ClusterSpec, command: Sequence[str], *, rdzv: bool = False,
                    master_port: int = 29500, preamble: Sequence[str] = (), master_addr: Optional[str] = None,
                    rdzv_id: str = "workbench", launcher: Sequence[str] = ("torchrun",),
                    exec_launcher: bool = False) -> str:
    """``torchrun`` script to run on every node: static rendezvous (``--node_rank``, ``--master_addr/port``) or,
    with ``rdzv=True``, the c10d rendezvous (``--rdzv_backend c10d --rdzv_endpoint``, no node rank needed).
    ``master_addr`` is node 0's address (a placeholder to fill in when not given); ``launcher`` replaces the
    ``torchrun`` program (e.g. ``python -m torch.distributed.run``); ``exec_launcher`` makes the shell exec it."""
    check_spec_types(cluster=cluster)
    last = cluster.num_nodes - 1
    lines = _header(f"torchrun: {cluster.num_nodes} node(s) x {cluster.gpus_per_node} {cluster.gpu.name}; "
                    f"run this script on every node")
    if master_addr is None:
        lines.append('MASTER_ADDR="${MASTER_ADDR:-localhost}"  # FILL IN for several nodes: address of node 0')
    else:
        lines.append(f'MASTER_ADDR="${{MASTER_ADDR:-{shlex.quote(master_addr)}}}"  # node 0')
    lines.append(f'MASTER_PORT="${{MASTER_PORT:-{master_port}}}"')
    program = _launcher_words(launcher, exec_launcher)
    if not rdzv:
        lines.insert(4, f'NODE_RANK="${{NODE_RANK:-0}}"  # 0..{last}: this node\'s index')
    words = _torchrun_words(cluster, rdzv=rdzv, master_port=master_port, master_addr=master_addr, rdzv_id=rdzv_id)
    launch = " ".join([program] + [text for text, _ in words]) + " \\"
    lines += list(preamble) + _NCCL_LINES + [""]
    return "\n".join(lines + [launch] + _command_lines(command)) + "\n"


def slurm_script(cluster: ClusterSpec, command: Sequence[str], *, job_name: str = "workbench",
                 time_limit: str = "24:00:00", partition: Optional[str] = None, cpus_per_task: int = 32,
                 master_port: int = 29500, preamble: Sequence[str] = ()) -> str:
    """``sbatch`` script: one task per node, each running ``torchrun`` for that node's GPUs with the c10d
    rendezvous on the first node of the allocation."""
    check_spec_types(cluster=cluster)
    if cpus_per_task < 1:
        raise ValueError(f"cpus_per_task={cpus_per_task} must be >= 1")
    lines = [
        "#!/usr/bin/env bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={cluster.num_nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={cluster.gpus_per_node}",
        f"#SBATCH --cpus-per-task={cpus_per_task}",
        f"#SBATCH --time={time_limit}",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    else:
        lines.append("##SBATCH --partition=gpu")
    lines += [
        f"# {cluster.num_nodes} node(s) x {cluster.gpus_per_node} {cluster.gpu.name}; one task per node runs torchrun,",
        "# which starts the GPU ranks. FILL IN: set the partition (drop one '#' from '##SBATCH --partition').",
        "set -euo pipefail",
        'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f"MASTER_PORT={master_port}",
        *preamble,
        *_NCCL_LINES,
        "",
        f"srun torchrun --nnodes {cluster.num_nodes} --nproc_per_node {cluster.gpus_per_node} "
        f'--rdzv_id "$SLURM_JOB_ID" --rdzv_backend c10d --rdzv_endpoint "$MASTER_ADDR:$MASTER_PORT" \\',
    ]
    return "\n".join(lines + _command_lines(command)) + "\n"
