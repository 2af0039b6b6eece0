"""``workbench export deepspeed|megatron|hybrid|launch``: write runnable configs for a plan and validate them.

``deepspeed --hf-auto`` writes the Hugging Face Trainer's form: ``"auto"`` where the Trainer fills values from
``TrainingArguments``, and ``training_args.json`` with the arguments that resolve them to the plan (validated
resolved).

Without ``--out`` the main file goes to stdout; with ``--out DIR`` the files are written there (``ds_config.json``,
``megatron_args.sh``, ``hybrid.sh``, ``hostfile``, ``launch.sh``). The validation result goes to stderr.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from workbench.commands.common import add_spec_arguments, specs_from_args
from workbench.defaults import GiB

KINDS = ("deepspeed", "megatron", "hybrid", "launch")
_KIND_ALIASES = {"megatron-deepspeed": "hybrid"}  # the engine's name also names its export
_DEFAULT_ENGINE = {"deepspeed": "deepspeed", "megatron": "megatron", "hybrid": "megatron-deepspeed",
                   "launch": "deepspeed"}
_KIND_ENGINES = {"deepspeed": ("deepspeed", "megatron-deepspeed"), "megatron": ("megatron",),
                 "hybrid": ("megatron-deepspeed",)}
"""The engines each kind writes files for (``launch``: every engine)."""
_ENGINE_KIND = {engine: kind for kind, engine in _DEFAULT_ENGINE.items() if kind != "launch"}
"""The export that writes files for each engine (the kind whose default it is)."""


def add_parser(sub) -> None:
    parser = sub.add_parser("export", help="write ds_config.json, Megatron/hybrid commands or launch scripts",
                            description=__doc__)
    parser.add_argument("kind", choices=KINDS + tuple(_KIND_ALIASES), metavar="{" + ",".join(KINDS) + "}",
                        help="what to export: hybrid writes the megatron-deepspeed engine's files (also accepted "
                             "as 'megatron-deepspeed')")
    parser.add_argument("--launcher", choices=["deepspeed", "torchrun", "slurm"],
                        help="launch: which launcher (default: deepspeed for engine deepspeed, else torchrun)")
    parser.add_argument("--hosts", help="launch: comma-separated host names for the hostfile")
    parser.add_argument("--out", metavar="DIR", help="write the files into DIR instead of printing")
    parser.add_argument("--hf-auto", action="store_true",
                        help="deepspeed: the Hugging Face Trainer's form, \"auto\" where the Trainer fills values "
                             "from TrainingArguments, plus training_args.json with the arguments that resolve them "
                             "to this plan")
    parser.add_argument("--nvme-path", metavar="DIR",
                        help="ZeRO-Infinity's swap folder, written as the offload sections' nvme_path when the plan "
                             "offloads to nvme: the mount of the node's local NVMe (default /local_nvme)")
    add_spec_arguments(parser)
    parser.set_defaults(func=run)


def _note(msg: str) -> None:
    print(msg, file=sys.stderr)


def _files(kind: str, args, model, cluster, plan) -> tuple[dict, str, bool]:
    """(file name -> text, name of the main file, validation passed)."""
    from workbench.configs import deepspeed as ds
    from workbench.configs import hybrid, launch, megatron
    from workbench.specs import Engine

    files: dict = {}
    ok = True
    options = ds_options(args, plan)
    if kind == "deepspeed" and args.hf_auto:
        cfg = ds.hf_trainer_ds_config(model, cluster, plan, options=options)
        targs = ds.hf_training_arguments(model, cluster, plan)
        files["ds_config.json"] = json.dumps(cfg, indent=2) + "\n"
        files["training_args.json"] = json.dumps({**targs, "deepspeed": "ds_config.json"}, indent=2) + "\n"
        resolved = ds.resolve_hf_auto(cfg, targs, world_size=plan.data_parallel, hidden_size=model.hidden_size)
        ok = _validate_ds(resolved, plan)
        return files, "ds_config.json", ok
    if args.hf_auto:
        raise ValueError(f"--hf-auto applies to 'export deepspeed' (the Trainer's ds_config), not '{kind}'")
    if kind == "deepspeed":
        cfg = ds.build_ds_config(model, cluster, plan, options=options)
        files["ds_config.json"] = json.dumps(cfg, indent=2) + "\n"
        ok = _validate_ds(cfg, plan)
        _moe_snippet(files, model, plan)
        _ulysses_snippet(files, model, plan)
        return files, "ds_config.json", ok
    if kind == "megatron":
        files["megatron_args.sh"] = megatron.megatron_command(model, cluster, plan)
        passed, message = megatron.validate_megatron_args(megatron.megatron_args(model, cluster, plan))
        _note(f"validation: {'OK, ' if passed else ''}{message}")
        ok = passed or "not validated" in message
        return files, "megatron_args.sh", ok
    if kind == "hybrid":
        files["hybrid.sh"] = hybrid.hybrid_command(model, cluster, plan)
        files["ds_config.json"] = json.dumps(hybrid.hybrid_ds_config(model, cluster, plan, options=options),
                                             indent=2) + "\n"
        ok, message = hybrid.validate_hybrid(model, cluster, plan)
        _note(f"validation: {'OK, ' if ok else 'FAILED, '}{message}")
        return files, "hybrid.sh", ok

    # launch
    launcher = args.launcher or launch.default_launcher(plan.engine)
    preamble: list = []
    if plan.engine is Engine.DEEPSPEED:
        cfg = ds.build_ds_config(model, cluster, plan, options=options)
        files["ds_config.json"] = json.dumps(cfg, indent=2) + "\n"
        ok = _validate_ds(cfg, plan)
        preamble = ['TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"  # FILL IN: your DeepSpeed training script '
                    '(calls deepspeed.initialize)']
        checkpointing = ds.hf_checkpointing_line(model, plan)  # the model's own checkpointing, not a ds_config
        if checkpointing:
            preamble.append(f"# in $TRAIN_SCRIPT, before deepspeed.initialize: {checkpointing}")
        command = ["$TRAIN_SCRIPT", "--deepspeed", "--deepspeed_config", "ds_config.json"]
        _moe_snippet(files, model, plan)
        _ulysses_snippet(files, model, plan)
    elif plan.engine is Engine.MEGATRON:
        args_ = megatron.megatron_args(model, cluster, plan)
        passed, message = megatron.validate_megatron_args(args_)
        _note(f"validation: {'OK, ' if passed else ''}{message}")
        ok = passed or "not validated" in message
        preamble = megatron.placeholder_lines(["MEGATRON_LM", "DATA_PATH", "TOKENIZER_MODEL", "CHECKPOINT_DIR"])
        preamble.append("export CUDA_DEVICE_MAX_CONNECTIONS=1")
        command = ["$MEGATRON_LM/pretrain_gpt.py", *args_]
    else:
        files["ds_config.json"] = json.dumps(hybrid.hybrid_ds_config(model, cluster, plan, options=options),
                                             indent=2) + "\n"
        ok, message = hybrid.validate_hybrid(model, cluster, plan)
        _note(f"validation: {'OK, ' if ok else 'FAILED, '}{message}")
        name, example, what = hybrid.HYBRID_PLACEHOLDER
        preamble = [f'{name}="${{{name}:-{example}}}"  # FILL IN: {what}',
                    *megatron.placeholder_lines(["DATA_PATH", "TOKENIZER_MODEL", "CHECKPOINT_DIR"]),
                    "export CUDA_DEVICE_MAX_CONNECTIONS=1"]
        command = [f"${name}/pretrain_gpt.py", *hybrid.hybrid_args(model, cluster, plan)]
    preamble += launch.allocator_lines(plan)
    if launcher == "deepspeed":
        hosts = parse_hosts(args.hosts) if args.hosts is not None else None
        files["hostfile"] = launch.hostfile(cluster, hosts)
        if plan.expandable_segments and cluster.num_nodes > 1:
            # DeepSpeed's multi-node launcher passes only its own variables and those in .deepspeed_env over ssh
            files[".deepspeed_env"] = f"{launch.ALLOC_CONF_VAR}=expandable_segments:True\n"
        files["launch.sh"] = launch.deepspeed_launch_script(cluster, command, preamble=preamble)
    elif launcher == "torchrun":
        files["launch.sh"] = launch.torchrun_script(cluster, command, rdzv=cluster.num_nodes > 1, preamble=preamble)
    else:
        files["launch.sh"] = launch.slurm_script(cluster, command, preamble=preamble)
    return files, "launch.sh", ok


def ds_options(args, plan):
    """The :class:`workbench.configs.deepspeed.DeepSpeedOptions` the command line sets (``--nvme-path``), ``None``
    for the defaults; a plan offloading to nvme without ``--nvme-path`` gets a note on stderr naming the folder
    written."""
    from workbench.configs.deepspeed import DeepSpeedOptions
    from workbench.specs import Offload

    path = getattr(args, "nvme_path", None)
    if path is None:
        if Offload.NVME in (plan.offload_optimizer, plan.offload_params):
            _note(f"note: nvme_path is {DeepSpeedOptions().nvme_path} in the offload sections: give --nvme-path with "
                  f"the mount of the node's local NVMe (DeepSpeed swaps there)")
        return None
    return DeepSpeedOptions(nvme_path=path)


def _moe_snippet(files: dict, model, plan) -> None:
    """DeepSpeed-MoE lives in the model code, not in ds_config: write its ``MoE(...)`` arguments and the optimizer
    param-group split as ``moe_layer.py`` and print them on stderr."""
    if not (model.is_moe and plan.deepspeed_moe):
        return
    from workbench import dsmoe

    files["moe_layer.py"] = dsmoe.moe_layer_snippet(model, plan) + "\n"
    _note(files["moe_layer.py"].rstrip())


def _ulysses_snippet(files: dict, model, plan) -> None:
    """DeepSpeed-Ulysses lives in the model code (its groups and the attention wrapper): write it as
    ``ulysses_attention.py`` and print it on stderr."""
    if not plan.is_ulysses:
        return
    from workbench.configs.deepspeed import ulysses_snippet

    files["ulysses_attention.py"] = ulysses_snippet(model, plan)
    _note(files["ulysses_attention.py"].rstrip())


def _validate_ds(cfg: dict, plan) -> bool:
    from workbench.configs import deepspeed as ds
    from workbench.configs.lint import lint_ds_config

    try:
        ds.validate_ds_config(cfg, plan.world_size, model_parallel_size=plan.model_parallel_size)
    except ValueError as exc:
        _note(f"validation: FAILED, {exc}")
        return False
    warnings = [f for f in lint_ds_config(cfg, world_size=plan.data_parallel) if f.severity != "error"]
    _note(f"validation: OK, DeepSpeed {ds.deepspeed_version()} DeepSpeedConfig accepts it for data-parallel size "
          f"{plan.data_parallel} (world size {plan.world_size}); lint: "
          + ("no findings" if not warnings else "; ".join(str(w) for w in warnings)))
    return True


def parse_hosts(text: str) -> list:
    """``--hosts a,b,c`` as host names; ``ValueError`` naming ``--hosts`` when it is empty or blank, or when an
    entry between the commas is (``a,,b``, ``a,b,``)."""
    names = [h.strip() for h in text.split(",")]
    if not any(names):
        raise ValueError(f"--hosts {text!r} is empty; give the host names, one per node, separated by commas "
                         f"(e.g. --hosts node1,node2)")
    blank = [i + 1 for i, h in enumerate(names) if not h]
    if blank:
        which = ", ".join(str(i) for i in blank)
        raise ValueError(f"--hosts {text!r}: entr{'ies' if len(blank) > 1 else 'y'} {which} of {len(names)} "
                         f"{'are' if len(blank) > 1 else 'is'} empty; give one host name per node, separated by "
                         f"commas")
    return names


def check_kind_flags(args) -> None:
    """``ValueError`` for flags the export ``kind`` would ignore silently (``--launcher``/``--hosts`` outside
    ``launch``, ``--hosts`` without the DeepSpeed launcher) and for an ``--engine`` it writes no files for, naming
    the export that does."""
    if args.kind == "launch":
        engine = args.engine or _DEFAULT_ENGINE["launch"]
        from workbench.configs.launch import default_launcher

        launcher = args.launcher or default_launcher(engine)
        if args.hosts is not None and launcher != "deepspeed":
            raise ValueError(f"--hosts {args.hosts} names the DeepSpeed launcher's hostfile; launcher={launcher} "
                             f"takes no host list (torchrun: MASTER_ADDR and NODE_RANK on each node; slurm: the "
                             f"allocation)")
        if args.hosts is not None:
            parse_hosts(args.hosts)
    else:
        given = [f"--{name} {value}" for name, value in (("launcher", args.launcher), ("hosts", args.hosts))
                 if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)}: only 'export launch' writes a launch script, not "
                             f"'{args.kind}'")
        engine = args.engine or _DEFAULT_ENGINE[args.kind]
        if engine not in _KIND_ENGINES[args.kind]:
            allowed = " or ".join(f"'{e}'" for e in _KIND_ENGINES[args.kind])
            raise ValueError(f"engine='{engine}' is not what 'export {args.kind}' writes (engine {allowed}); use "
                             f"`workbench export {_ENGINE_KIND[engine]}` (or `export launch`) for it")


def check_hosts_for_cluster(text: str, cluster) -> None:
    """``ValueError`` naming ``--hosts`` when its names do not fit the cluster's nodes (count, repeats, spaces),
    as the hostfile would refuse them."""
    from workbench.configs.launch import checked_hosts

    try:
        checked_hosts(cluster, parse_hosts(text))
    except ValueError as exc:
        raise ValueError(f"--hosts {text}: {exc}") from None


def _note_fit(model, cluster, plan) -> None:
    """A warning on stderr when the estimate (constant reserve, no replay) says the exported plan does not fit the
    GPU, the host memory or the NVMe: the files are valid, the run would fail."""
    from workbench.estimate import estimate

    mem = estimate(model, cluster, plan, checks=False).memory
    if mem.fits:
        return
    where = []
    if not mem.fits_gpu:
        where.append(f"{mem.per_gpu_peak_bytes / GiB:.1f} GiB per GPU (up to "
                     f"{(mem.per_gpu_peak_bytes + mem.band_high_bytes) / GiB:.1f} GiB at the error band's upper side) "
                     f"of {mem.capacity_bytes / GiB:.1f} GiB")
    if not mem.fits_host:
        where.append(f"{mem.host_bytes_per_node / GiB:.1f} GiB of host memory per node of "
                     f"{mem.host_capacity_bytes_per_node / GiB:.0f} GiB")
    if not mem.fits_nvme:
        where.append(f"{mem.nvme_bytes_per_node / GiB:.1f} GiB of NVMe per node of "
                     f"{mem.nvme_capacity_bytes_per_node / GiB:.0f} GiB")
    _note(f"warning: the estimate says this plan does not fit: {'; '.join(where)} (`workbench advise` with the same "
          f"flags lists what to change)")


def run(args) -> int:
    from workbench.cli import payload_stream

    args.kind = _KIND_ALIASES.get(args.kind, args.kind)
    check_kind_flags(args)
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a file; export writes its files into a folder")
    model, cluster, plan = specs_from_args(args, default_engine=_DEFAULT_ENGINE[args.kind])
    if args.hosts is not None:  # one name per node, before the configs are written and validated
        check_hosts_for_cluster(args.hosts, cluster)
    files, main, ok = _files(args.kind, args, model, cluster, plan)
    _note_fit(model, cluster, plan)
    if args.out:
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"--out {args.out}: cannot create the folder ({exc.strerror})") from None
        for name, text in files.items():
            path = out / name
            path.write_text(text)
            if name.endswith(".sh"):
                path.chmod(0o755)
            print(path, file=payload_stream())
    else:
        payload_stream().write(files[main])
        others = [n for n in files if n != main]
        if others:
            _note(f"also: {', '.join(others)} (use --out DIR to write every file)")
    return 0 if ok else 1
