"""Rank entry script of a launched run: ``python train.py --run-dir DIR`` under ``deepspeed`` or ``torchrun``.

Reads ``DIR/run.json`` (resolved specs and options), ``DIR/megatron_args.json`` (the ``TransformerConfig``
arguments the launcher computed; megatron-core models) and, for the DeepSpeed engines, ``DIR/ds_config.json``.
Before anything heavy it starts the owner watch (:func:`workbench.runs.processes.watch_owner`): the rank dies, and
records why, when the process that launched the run dies. Engines:

* ``deepspeed`` — ``deepspeed.initialize`` on the GPTModel (data parallel, ZeRO 0-3, offload, recompute); for a
  transformers model on its causal LM, or (``options.hf.trainer == "hf"``) transformers' ``Trainer`` with the
  run's ``"auto"`` ds_config.
* ``megatron`` — megatron-core ``parallel_state`` + ``DistributedDataParallel`` + ``get_megatron_optimizer``
  (plain or distributed) + ``get_forward_backward_func`` (no pipelining, 1F1B, or interleaved 1F1B).
* ``megatron-deepspeed`` (hybrid) — megatron-core tensor-parallel GPTModel under DeepSpeed ZeRO over the
  data-parallel group, with Megatron's parallel state as DeepSpeed's ``mpu``. With pipeline parallel > 1
  (:func:`train_hybrid_pipeline`): each rank holds one pipeline stage of the tensor-parallel model, megatron-core's
  1F1B schedule moves activations and gradients between the stages, and DeepSpeed ZeRO-1 reduces the gradients and
  partitions the optimizer over the stage's data-parallel group, in the order DeepSpeed's own pipeline engine uses.

Each rank appends JSON lines to ``DIR/metrics/rank{R}.jsonl``: a ``start`` record (pid), for the hybrid a ``groups``
record (its tensor/pipeline/data-parallel group ranks), one ``step`` record per step (loss, step seconds, tokens/s,
peak memory bytes, and DeepSpeed's gradient norm for the DeepSpeed engines) and a final ``done`` record, or an ``error`` record
(``kind`` ``oom``, ``error``, or ``terminated`` when the launcher stopped it) before exiting non-zero. Peak memory is ``torch.cuda.max_memory_allocated`` on a GPU
and the peak resident set size (``ru_maxrss``) on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import traceback
from functools import partial
from pathlib import Path


# ----------------------------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------------------------
class MetricsWriter:
    def __init__(self, path: Path, rank: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self._f = open(path, "a", buffering=1)
        self.step_seconds = []

    def write(self, record_type: str, **fields) -> None:
        record = {"type": record_type, "rank": self.rank, "time": time.time(), **fields}
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def step(self, step: int, loss, seconds: float, tokens: int, memory_bytes: int, grad_norm=None) -> None:
        self.step_seconds.append(seconds)
        extra = {} if grad_norm is None else {"grad_norm": float(grad_norm)}
        self.write("step", step=step, loss=None if loss is None else float(loss), step_seconds=seconds,
                   tokens_per_second=tokens / seconds if seconds > 0 else None, memory_bytes=int(memory_bytes),
                   **extra)

    def done(self, memory_bytes: int) -> None:
        timed = self.step_seconds[2:] if len(self.step_seconds) > 3 else self.step_seconds
        self.write("done", steps=len(self.step_seconds), peak_memory_bytes=int(memory_bytes),
                   median_step_seconds=statistics.median(timed) if timed else None)


def peak_memory_bytes() -> int:
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return ("out of memory" in text.lower() or "can't allocate memory" in text
            or type(exc).__name__ == "OutOfMemoryError")


def is_termination(exc: BaseException) -> bool:
    """The launcher stopping this rank (torch elastic's SignalException, SIGINT) rather than a fault of its own."""
    return isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "SignalException" or (
        isinstance(exc, SystemExit) and bool(exc.code))


def limit_memory(extra_bytes: int) -> None:
    """Cap this process's address space at its current size plus ``extra_bytes`` (a CPU stand-in for a device's
    capacity: allocations beyond it raise, as a GPU allocation beyond HBM does)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    current = pages * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (current + int(extra_bytes), resource.RLIM_INFINITY))


# ----------------------------------------------------------------------------------------------------------------
# Set-up shared by the engines
# ----------------------------------------------------------------------------------------------------------------
def load_run(run_dir: Path):
    from workbench.runs.specio import specs_from_dict

    run = json.loads((run_dir / "run.json").read_text())
    args_path = run_dir / "megatron_args.json"  # absent for a transformers model
    run["megatron_args"] = json.loads(args_path.read_text()) if args_path.exists() else None
    model, cluster, plan = specs_from_dict(run["specs"])
    return run, model, cluster, plan


def device():
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def megatron_setup(plan, seed: int) -> None:
    """Megatron's parallel state (tp, pp, vp) and its RNG tracker; the CPU adapter when CUDA is absent."""
    from workbench.runs import cpu_adapter

    cpu_adapter.apply()
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=plan.tensor_parallel,
        pipeline_model_parallel_size=plan.pipeline_parallel,
        virtual_pipeline_model_parallel_size=plan.virtual_pipeline if plan.virtual_pipeline > 1 else None)
    model_parallel_cuda_manual_seed(seed)


def single_rank_megatron(plan, seed: int = 1234) -> None:
    """One gloo rank of megatron-core in this process on a free local port (:func:`megatron_setup`: the CPU adapter
    when CUDA is absent, the parallel state of ``plan``, the RNG tracker), for work that builds megatron-core models
    outside a launched run (the allocation trace, the CPU counting scripts). Does nothing the second time."""
    import socket

    import torch.distributed as dist

    if not dist.is_initialized():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        dist.init_process_group("gloo")
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        megatron_setup(plan, seed)


class MegatronMpu:
    """DeepSpeed's model-parallel-unit interface over megatron-core's ``parallel_state``. Its model-parallel group is
    megatron's tensor x pipeline group (DeepSpeed sums gradient-norm squares over it), its tensor-parallel rank
    decides which rank counts a tensor-parallel-replicated parameter in that norm."""

    def __init__(self):
        from megatron.core import parallel_state

        self.ps = parallel_state

    def get_model_parallel_group(self):
        return self.ps.get_model_parallel_group()

    def get_model_parallel_world_size(self):
        import torch.distributed as dist

        return dist.get_world_size(group=self.ps.get_model_parallel_group())

    def get_model_parallel_rank(self):
        import torch.distributed as dist

        return dist.get_rank(group=self.ps.get_model_parallel_group())

    def get_data_parallel_group(self):
        return self.ps.get_data_parallel_group()

    def get_data_parallel_world_size(self):
        return self.ps.get_data_parallel_world_size()

    def get_data_parallel_rank(self):
        return self.ps.get_data_parallel_rank()

    def __getattr__(self, name):  # get_tensor_model_parallel_* and friends
        return getattr(self.ps, name)


def mean_over_group(value: float, group=None) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64,
                     device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(t, group=group)
    return float(t.item()) / dist.get_world_size(group=group)


def pipeline_loss(reduced, last_stage: bool, data_parallel: int):
    """The step's loss from megatron-core's pipeline schedule output: the mean of the micro-batches' ``lm loss`` on
    the last stage, averaged over its data-parallel group; ``None`` on the other stages (they see no loss)."""
    if not last_stage:
        return None
    from megatron.core import parallel_state as ps
    import torch

    local = float(torch.stack([r["lm loss"] for r in reduced]).float().mean())
    return mean_over_group(local, ps.get_data_parallel_group()) if data_parallel > 1 else local


def write_groups(writer: MetricsWriter) -> None:
    """A ``groups`` record: the global ranks of this rank's tensor-, pipeline- and data-parallel groups as
    megatron-core built them (what :func:`workbench.layout.build_layout` predicts)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    writer.write("groups", tp=dist.get_process_group_ranks(ps.get_tensor_model_parallel_group()),
                 pp=dist.get_process_group_ranks(ps.get_pipeline_model_parallel_group()),
                 dp=dist.get_process_group_ranks(ps.get_data_parallel_group()))


def global_grad_norm(engine):
    """The gradient norm DeepSpeed computed for the last optimizer step, before clipping (None when the engine
    did not compute one)."""
    norm = engine.get_global_grad_norm()
    if norm is None:
        return None
    return float(norm.item() if hasattr(norm, "item") else norm)


def to_device(batch: dict, dev) -> dict:
    return {k: v.to(dev, non_blocking=True) for k, v in batch.items()}


# ----------------------------------------------------------------------------------------------------------------
# DeepSpeed and hybrid
# ----------------------------------------------------------------------------------------------------------------
def train_deepspeed(run, model_spec, plan, writer: MetricsWriter, hybrid: bool) -> None:
    import deepspeed
    import torch

    from workbench.runs.data import TokenSamples, parse_source
    from workbench.runs.model import build_gpt, causal_mask, init_layout_independent

    opts = run["options"]
    dev = device()
    deepspeed.init_distributed()
    megatron_setup(plan, opts["seed"])
    if hybrid:
        write_groups(writer)
    from megatron.core import parallel_state

    if opts.get("memory_limit_bytes"):
        limit_memory(opts["memory_limit_bytes"])
    torch.manual_seed(opts["seed"])
    net = build_gpt(model_spec, plan, config_kwargs=run["megatron_args"])
    if dev.type == "cuda":
        net = net.to(dev)
    init_layout_independent(net, model_spec, seed=opts["seed"], tensor_parallel=plan.tensor_parallel,
                            tp_rank=parallel_state.get_tensor_model_parallel_rank())
    ds_config = json.loads((Path(run["run_dir"]) / "ds_config.json").read_text())
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=[p for p in net.parameters()],
                                           config=ds_config, mpu=MegatronMpu() if hybrid else None)
    dp, dp_rank = parallel_state.get_data_parallel_world_size(), parallel_state.get_data_parallel_rank()
    samples = TokenSamples(parse_source(opts["data"]), vocab_size=model_spec.vocab_size,
                           seq_length=model_spec.seq_length, seed=opts["seed"])
    mask = causal_mask(model_spec.seq_length, device=dev)
    tokens_per_step = plan.global_batch_size * model_spec.seq_length
    dp_group = parallel_state.get_data_parallel_group()

    def micro_loss(b):
        b = to_device(b, dev)
        return engine(b["tokens"], b["position_ids"], mask, labels=b["labels"]).float().mean()

    deepspeed_steps(engine, plan, opts["steps"], samples, micro_loss, writer, dp=dp, dp_rank=dp_rank,
                    dp_group=dp_group, tokens_per_step=tokens_per_step)


def deepspeed_steps(engine, plan, steps: int, samples, micro_loss, writer, *, dp: int, dp_rank: int, dp_group,
                    tokens_per_step: int) -> None:
    """The DeepSpeed training loop shared by the megatron-core and transformers models: per step, one
    ``engine.backward`` / ``engine.step`` per micro-batch of this data-parallel rank (DeepSpeed steps the optimizer at
    the accumulation boundary), then the step's mean loss over the data-parallel group, its seconds, peak memory and
    DeepSpeed's gradient norm. ``micro_loss(batch)`` is the model's loss on one micro-batch (a tensor)."""
    import torch

    from workbench.runs.data import microbatch, sample_indices

    for step in range(steps):
        sync()
        t0 = time.perf_counter()
        losses = []
        for m in range(plan.gradient_accumulation_steps):
            idx = sample_indices(step, m, dp_rank=dp_rank, data_parallel=dp,
                                 micro_batch_size=plan.micro_batch_size, global_batch_size=plan.global_batch_size)
            loss = micro_loss(microbatch(samples, idx))
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach().float())
        sync()
        seconds = time.perf_counter() - t0
        local = float(torch.stack(losses).mean())
        loss = mean_over_group(local, dp_group) if dp > 1 else local
        writer.step(step, loss, seconds, tokens_per_step, peak_memory_bytes(), grad_norm=global_grad_norm(engine))


def tied_output_weight(chunk):
    """The last stage's copy of the word embeddings (the tied output layer) when it is a separate parameter: the
    model is tied and this stage holds the output layer but not the embedding (pipeline parallel > 1)."""
    if not getattr(chunk, "share_embeddings_and_output_weights", False):
        return None
    if getattr(chunk, "post_process", False) and not getattr(chunk, "pre_process", False):
        return chunk.output_layer.weight
    return None


def allreduce_tied_embedding_grads(chunk) -> None:
    """Sum the gradients of the tied word-embedding copies of the first and the last pipeline stage over megatron's
    embedding group (what a single process accumulates in one tensor; DeepSpeed's pipeline engine does the same for
    its tied modules in ``_exec_reduce_tied_grads`` before the data-parallel reduction)."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    if not getattr(chunk, "share_embeddings_and_output_weights", False):
        return
    if ps.get_pipeline_model_parallel_world_size() == 1 or not ps.is_rank_in_embedding_group(ignore_virtual=True):
        return
    weight = chunk.shared_embedding_or_output_weight()
    if weight.grad is None:
        weight.grad = torch.zeros_like(weight)
    dist.all_reduce(weight.grad, group=ps.get_embedding_group())


def train_hybrid_pipeline(run, model_spec, plan, writer: MetricsWriter) -> None:
    """The hybrid with pipeline parallel > 1: Megatron TP x PP with DeepSpeed ZeRO-1 over each stage's data-parallel
    group (the composition of Megatron-DeepSpeed's ``--pipeline-model-parallel-size P --zero-stage 1``).

    Per optimizer step, the order of DeepSpeed's ``PipelineEngine.train_batch`` (deepspeed/runtime/pipe/engine.py):

    1. the 1F1B schedule over all micro-batches (megatron-core's ``forward_backward_pipelining_without_interleaving``
       on this rank's stage); the last stage's loss is divided by the number of micro-batches, earlier stages run
       backward on the gradient received from the next stage — DeepSpeed's engine scales only the last stage's
       loss by the accumulation steps (``PipelineEngine._backward_prologue_per_tensor``), the same division once;
    2. the tied word-embedding gradients summed between the first and last stage (``_exec_reduce_tied_grads``);
    3. ``engine.allreduce_gradients()`` at the accumulation boundary (``_exec_reduce_grads``): ZeRO-1's
       ``reduce_gradients`` averages the gradients over the stage's data-parallel group into each rank's partition;
    4. ``engine.step()`` (``_exec_optimizer_step``): the gradient norm — squares summed over the data-parallel and the
       tensor x pipeline group, the last stage's tied copy marked ``ds_pipe_replicated`` so it counts once, as
       DeepSpeed's ``PipelineModule`` marks it — clipping, Adam on the partition, the all-gather of updated
       parameters, the learning-rate schedule.

    DeepSpeed itself refuses ZeRO-2/3 here: ``PipelineEngine`` asserts "ZeRO-2 and ZeRO-3 are incompatible with
    pipeline parallelism" (the launcher refuses such plans before anything starts).
    """
    import deepspeed
    import torch

    from workbench.runs.data import TokenSamples, microbatch, parse_source, sample_indices
    from workbench.runs.model import build_gpt, causal_mask, init_layout_independent

    opts = run["options"]
    dev = device()
    deepspeed.init_distributed()
    megatron_setup(plan, opts["seed"])
    write_groups(writer)
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    if plan.virtual_pipeline > 1 or int(plan.zero_stage) > 1:
        raise ValueError(f"the hybrid pipeline runs ZeRO-0/1 without virtual stages (zero_stage="
                         f"{int(plan.zero_stage)}, virtual_pipeline={plan.virtual_pipeline})")
    if opts.get("memory_limit_bytes"):
        limit_memory(opts["memory_limit_bytes"])
    torch.manual_seed(opts["seed"])
    first, last = ps.is_pipeline_first_stage(ignore_virtual=True), ps.is_pipeline_last_stage(ignore_virtual=True)
    chunk = build_gpt(model_spec, plan, pre_process=first, post_process=last,
                      config_kwargs=run["megatron_args"])
    if dev.type == "cuda":
        chunk = chunk.to(dev)
    init_layout_independent(chunk, model_spec, seed=opts["seed"], tensor_parallel=plan.tensor_parallel,
                            tp_rank=ps.get_tensor_model_parallel_rank())
    replica = tied_output_weight(chunk)
    if replica is not None:
        replica.ds_pipe_replicated = True  # deepspeed.runtime.constants.PIPE_REPLICATED: one copy in the norm
    ds_config = json.loads((Path(run["run_dir"]) / "ds_config.json").read_text())
    engine, _, _, _ = deepspeed.initialize(model=chunk, model_parameters=[p for p in chunk.parameters()],
                                           config=ds_config, mpu=MegatronMpu())
    # one engine.step() per global batch: the schedule ran every micro-batch, so each step is a boundary
    engine.set_gradient_accumulation_boundary(True)
    config = chunk.config
    config.finalize_model_grads_func = lambda *_a, **_k: allreduce_tied_embedding_grads(chunk)

    dp, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    samples = TokenSamples(parse_source(opts["data"]), vocab_size=model_spec.vocab_size,
                           seq_length=model_spec.seq_length, seed=opts["seed"])
    mask = causal_mask(model_spec.seq_length, device=dev)
    tokens_per_step = plan.global_batch_size * model_spec.seq_length
    forward_backward = get_forward_backward_func()

    def batches(step):
        for m in range(plan.num_microbatches):
            idx = sample_indices(step, m, dp_rank=dp_rank, data_parallel=dp,
                                 micro_batch_size=plan.micro_batch_size, global_batch_size=plan.global_batch_size)
            yield to_device(microbatch(samples, idx), dev)

    def loss_func(output_tensor):
        loss = output_tensor.float().mean()
        return loss, {"lm loss": loss.detach().clone()}  # the schedule divides ``loss`` in place

    def forward_step(data_iterator, model):
        b = next(data_iterator)
        return model(b["tokens"], b["position_ids"], mask, labels=b["labels"]), loss_func

    for step in range(opts["steps"]):
        sync()
        t0 = time.perf_counter()
        reduced = forward_backward(forward_step_func=forward_step, data_iterator=batches(step), model=chunk,
                                   num_microbatches=plan.num_microbatches, seq_length=model_spec.seq_length,
                                   micro_batch_size=plan.micro_batch_size,
                                   decoder_seq_length=model_spec.seq_length, forward_only=False)
        engine.allreduce_gradients()
        engine.step()
        sync()
        seconds = time.perf_counter() - t0
        writer.step(step, pipeline_loss(reduced, last, dp), seconds, tokens_per_step, peak_memory_bytes(),
                    grad_norm=global_grad_norm(engine))


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face transformers model under DeepSpeed
# ----------------------------------------------------------------------------------------------------------------
def build_hf_model(run, ds_config: dict, *, checkpointing: bool = True, zero_init: bool = True):
    """The transformers causal LM of the run: the weights in the model directory when there are some, else a
    random initialisation from its config.json; under ZeRO-3 built inside ``deepspeed.zero.Init`` (transformers
    does so while an ``HfDeepSpeedConfig`` is alive, so no rank materialises the whole model), or with
    ``zero_init=False`` (the plan's ``zero_init``) whole on the device first, as a plain script builds it, for
    ``deepspeed.initialize`` to partition. Then gradient
    checkpointing (unless ``checkpointing=False``: the Trainer enables it itself) and LoRA adapters (peft) as the run
    options say. ``ds_config=None``: a ``TrainingArguments`` with the config is alive already. Returns
    ``(model, keep_alive)``."""
    from transformers import AutoModelForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    from workbench.hf import _config_object

    hf = run["options"]["hf"]
    zero3 = ds_config is not None and int((ds_config.get("zero_optimization") or {}).get("stage", 0)) == 3
    keep_alive = HfDeepSpeedConfig(ds_config) if zero3 and zero_init else None
    data = json.loads((Path(run["run_dir"]) / "hf_config.json").read_text())
    cfg = _config_object(data, "hf_config.json")
    cfg.use_cache = False
    kwargs = {"attn_implementation": hf["attn_implementation"]}
    if hf.get("experts_implementation"):  # the MoE families' experts kernel (transformers' experts_implementation)
        kwargs["experts_implementation"] = hf["experts_implementation"]
    if hf["weights"]:
        net = AutoModelForCausalLM.from_pretrained(hf["path"], config=cfg, **kwargs)
    elif ds_config is not None and keep_alive is None:
        # on the device in the engine's dtype, as the memory model and the allocator replay build it: no copy of the
        # whole model in host memory (fp32 from_config on the host holds 4 bytes a parameter per rank there)
        import torch

        with torch.device(device()):
            net = AutoModelForCausalLM.from_config(cfg, dtype=_ds_dtype(ds_config), **kwargs)
    else:  # inside deepspeed.zero.Init (it places each module's partitions), or the Trainer's own build
        net = AutoModelForCausalLM.from_config(cfg, **kwargs)
    if zero3 and not zero_init:  # the whole model on the device before DeepSpeed partitions it
        net = net.to(device())
    from workbench.hf import enable_layer_checkpointing, with_lora

    if hf["gradient_checkpointing"] and checkpointing:
        enable_layer_checkpointing(net, hf.get("checkpoint_every", 1))
    if hf["lora"]:
        net = with_lora(net, bias="none", **hf["lora"])
    return net, keep_alive


def _ds_dtype(ds_config: dict):
    """The torch dtype a ds_config trains the model's parameters in: bf16 or fp16 where enabled (read as DeepSpeed
    reads its booleans), else fp32; None where a section says ``"auto"`` (the Trainer's to resolve: transformers' own
    default then)."""
    import torch

    from workbench.configs.importer import read_ds_bool

    sections = {"bf16": ds_config.get("bf16", ds_config.get("bfloat16")), "fp16": ds_config.get("fp16")}
    enabled = {key: read_ds_bool((section or {}).get("enabled"), f"{key}.enabled") for key, section in sections.items()}
    if "auto" in enabled.values():
        return None
    for key, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if enabled[key]:
            return dtype
    return torch.float32


def _partitioned(net) -> bool:
    """Whether the freshly built ``net``'s parameters are ZeRO-3 parameters already (built inside
    ``deepspeed.zero.Init``; LoRA adapters added after it are not, so any one of them says it)."""
    return any(hasattr(p, "ds_id") for p in net.parameters())


def _experts_used(net, model_spec) -> dict:
    """``{"experts_implementation": ...}``: the experts kernel transformers resolved for an MoE model (its config's
    ``_experts_implementation``), to set beside the ModelSpec's; ``{}`` for a dense model."""
    if not model_spec.is_moe:
        return {}
    return {"experts_implementation": getattr(net.config, "_experts_implementation", None)}


def train_hf(run, model_spec, plan, writer: MetricsWriter) -> None:
    """A Hugging Face model under the DeepSpeed engine: the exported ds_config (ZeRO 0-3, offload), trainable
    parameters only to the optimizer (LoRA), ``model(input_ids, labels=input_ids).loss`` (transformers shifts the
    labels and computes the loss in fp32)."""
    import deepspeed
    import torch
    import torch.distributed as dist

    from workbench.runs.data import TokenSamples, parse_source
    from workbench.specs import builds_in_zero_init

    opts = run["options"]
    dev = device()
    deepspeed.init_distributed()
    if opts.get("memory_limit_bytes"):
        limit_memory(opts["memory_limit_bytes"])
    torch.manual_seed(opts["seed"])
    ds_config = json.loads((Path(run["run_dir"]) / "ds_config.json").read_text())
    net, _keep_alive = build_hf_model(run, ds_config, zero_init=builds_in_zero_init(model_spec, plan))
    trainable = [p for p in net.parameters() if p.requires_grad]
    numel = lambda p: int(getattr(p, "ds_numel", p.numel()))  # noqa: E731 - ZeRO-3 partitions hold ds_numel
    writer.write("model", parameters=sum(numel(p) for p in net.parameters()),
                 trainable=sum(numel(p) for p in trainable), built_in_zero_init=_partitioned(net),
                 **_experts_used(net, model_spec))
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=trainable, config=ds_config)
    net.train()
    dp, dp_rank = dist.get_world_size(), dist.get_rank()
    samples = TokenSamples(parse_source(opts["data"]), vocab_size=model_spec.vocab_size,
                           seq_length=model_spec.seq_length, seed=opts["seed"])
    tokens_per_step = plan.global_batch_size * model_spec.seq_length

    def micro_loss(b):
        ids = torch.cat([b["tokens"], b["labels"][:, -1:]], dim=1)[:, -model_spec.seq_length:].to(dev)
        return engine(input_ids=ids, labels=ids).loss

    deepspeed_steps(engine, plan, opts["steps"], samples, micro_loss, writer, dp=dp, dp_rank=dp_rank, dp_group=None,
                    tokens_per_step=tokens_per_step)


def plain_json(value):
    """``value`` as strict JSON data: non-finite floats (accelerate writes ``steps_per_print`` = inf) and other
    objects become strings."""
    import math

    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class HfTokens:
    """The run's token samples as a map-style dataset for transformers' ``Trainer``: item ``i`` is global sample
    ``i`` as ``{"input_ids", "labels"}`` of ``seq_length`` tokens (the model shifts the labels itself)."""

    def __init__(self, samples, length: int, seq_length: int):
        self.samples, self.length, self.seq_length = samples, length, seq_length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        ids = self.samples[i][-self.seq_length:]
        return {"input_ids": ids, "labels": ids}


def train_hf_trainer(run, model_spec, plan, writer: MetricsWriter) -> None:
    """A Hugging Face model trained by transformers' ``Trainer`` with ``TrainingArguments(deepspeed=ds_config)``:
    the run's ds_config holds ``"auto"`` values, which the Trainer fills from the arguments in ``run.json``
    (``options.hf.training_args``) exactly as for any user of it. The arguments exist before the model, so under
    ZeRO-3 transformers builds it inside ``deepspeed.zero.Init``; the Trainer enables gradient checkpointing and
    hands the trainable parameters (LoRA: the adapters) to DeepSpeed's optimizer. A plan with ``zero_init=False``
    has its model built before the arguments, whole on the device.

    A callback writes what the engine path writes: the ``model`` record, a ``ds_config`` record (rank 0: the config
    the DeepSpeed engine was initialised with, the Trainer's resolution of every ``"auto"``; also
    ``ds_config_resolved.json``), and one ``step`` record per optimizer step: the training step's seconds (from
    ``on_step_begin`` to ``on_step_end``, synchronised: forward, backward and optimizer of every micro-batch), the
    Trainer's logged loss (mean over ranks, ``logging_steps=1``) and gradient norm, peak memory."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from workbench.runs.data import TokenSamples, parse_source
    from workbench.specs import builds_in_zero_init

    opts = run["options"]
    hf = opts["hf"]
    run_dir = Path(run["run_dir"])
    if opts.get("memory_limit_bytes"):
        limit_memory(opts["memory_limit_bytes"])
    torch.manual_seed(opts["seed"])
    ds_config = json.loads((run_dir / "ds_config.json").read_text())
    on_cpu = not torch.cuda.is_available()
    # the process group before ZeRO-3's zero.Init reads the world size from it (TrainingArguments sets it up on GPUs
    # only; on the CPU zero.Init would see one rank and refuse the batch sizes)
    import deepspeed

    deepspeed.init_distributed()
    net = None
    if plan.zero_stage == 3 and not builds_in_zero_init(model_spec, plan):  # built before the arguments exist: no
        net, _ = build_hf_model(run, ds_config, checkpointing=False, zero_init=False)  # zero.Init, whole on the device
    args = TrainingArguments(output_dir=str(run_dir / "trainer"), deepspeed=ds_config, report_to="none",
                             save_strategy="no", logging_steps=1, disable_tqdm=True, remove_unused_columns=False,
                             dataloader_num_workers=0, use_cpu=on_cpu, **hf["training_args"])
    if net is None:  # TrainingArguments keeps the ZeRO-3 context alive: built inside deepspeed.zero.Init
        net, _ = build_hf_model(run, None, checkpointing=False)
    built_in_zero_init = _partitioned(net)
    samples = TokenSamples(parse_source(opts["data"]), vocab_size=model_spec.vocab_size,
                           seq_length=model_spec.seq_length, seed=opts["seed"])
    dataset = HfTokens(samples, opts["steps"] * plan.global_batch_size, model_spec.seq_length)
    tokens_per_step = plan.global_batch_size * model_spec.seq_length
    numel = lambda p: int(getattr(p, "ds_numel", p.numel()))  # noqa: E731 - ZeRO-3 partitions hold ds_numel

    class Record(TrainerCallback):
        t0 = seconds = None

        def on_train_begin(self, args_, state, control, **kw):
            engine = trainer.model_wrapped
            writer.write("model", parameters=sum(numel(p) for p in trainer.model.parameters()),
                         trainable=sum(numel(p) for p in trainer.model.parameters() if p.requires_grad),
                         built_in_zero_init=built_in_zero_init, **_experts_used(trainer.model, model_spec))
            if writer.rank == 0:
                resolved = getattr(engine, "config", None)
                if not isinstance(resolved, dict):
                    resolved = args_.hf_deepspeed_config.config
                resolved = plain_json(resolved)
                (run_dir / "ds_config_resolved.json").write_text(json.dumps(resolved, indent=2))
                writer.write("ds_config", config=resolved)

        def on_step_begin(self, args_, state, control, **kw):
            sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, args_, state, control, **kw):
            sync()
            self.seconds = time.perf_counter() - self.t0

        def on_log(self, args_, state, control, logs=None, **kw):
            if logs and "loss" in logs and self.seconds is not None:
                writer.step(state.global_step - 1, logs["loss"], self.seconds, tokens_per_step,
                            peak_memory_bytes(), grad_norm=logs.get("grad_norm"))
                self.seconds = None

    trainer = Trainer(model=net, args=args, train_dataset=dataset, callbacks=[Record()])
    trainer.train()


# ----------------------------------------------------------------------------------------------------------------
# megatron-core
# ----------------------------------------------------------------------------------------------------------------
def train_megatron(run, model_spec, plan, writer: MetricsWriter) -> None:
    import torch
    import torch.distributed as dist

    from workbench.runs.data import TokenSamples, microbatch, parse_source, sample_indices
    from workbench.runs.model import build_gpt, causal_mask, init_layout_independent

    opts = run["options"]
    dev = device()
    dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    megatron_setup(plan, opts["seed"])
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.module import Float16Module

    if opts.get("memory_limit_bytes"):
        limit_memory(opts["memory_limit_bytes"])
    torch.manual_seed(opts["seed"])
    vp = plan.virtual_pipeline
    chunks = []
    for i in range(vp):
        kw = {"vp_stage": i} if vp > 1 else {}
        pre = ps.is_pipeline_first_stage(ignore_virtual=False, **kw)
        post = ps.is_pipeline_last_stage(ignore_virtual=False, **kw)
        chunk = build_gpt(model_spec, plan, pre_process=pre, post_process=post, vp_stage=i if vp > 1 else None,
                          config_kwargs=run["megatron_args"])
        if dev.type == "cuda":
            chunk = chunk.to(dev)
        init_layout_independent(chunk, model_spec, seed=opts["seed"], tensor_parallel=plan.tensor_parallel,
                                tp_rank=ps.get_tensor_model_parallel_rank())
        chunks.append(chunk)
    config = chunks[0].config
    if config.bf16 or config.fp16:
        chunks = [Float16Module(config, c) for c in chunks]
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                               use_distributed_optimizer=plan.distributed_optimizer)
    chunks = [DistributedDataParallel(config=config, ddp_config=ddp_config, module=c, disable_bucketing=i > 0)
              for i, c in enumerate(chunks)]
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=opts["lr"], weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.95,
                        adam_eps=1e-8, clip_grad=opts["clip_grad"], bf16=config.bf16, fp16=config.fp16,
                        params_dtype=config.params_dtype,
                        use_distributed_optimizer=plan.distributed_optimizer),
        chunks)
    config.finalize_model_grads_func = finalize_model_grads
    if config.fp16:
        config.grad_scale_func = optimizer.scale_loss
    forward_backward = get_forward_backward_func()

    dp, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    samples = TokenSamples(parse_source(opts["data"]), vocab_size=model_spec.vocab_size,
                           seq_length=model_spec.seq_length, seed=opts["seed"])
    mask = causal_mask(model_spec.seq_length, device=dev)
    tokens_per_step = plan.global_batch_size * model_spec.seq_length
    last_stage = ps.is_pipeline_last_stage(ignore_virtual=True)

    def batches(step):
        for m in range(plan.num_microbatches):
            idx = sample_indices(step, m, dp_rank=dp_rank, data_parallel=dp,
                                 micro_batch_size=plan.micro_batch_size, global_batch_size=plan.global_batch_size)
            yield to_device(microbatch(samples, idx), dev)

    def loss_func(labels_mask_unused, output_tensor):
        loss = output_tensor.float().mean()
        return loss, {"lm loss": loss.detach().clone()}  # the schedule divides ``loss`` in place

    def forward_step(data_iterator, model):
        b = next(data_iterator)
        out = model(b["tokens"], b["position_ids"], mask, labels=b["labels"])
        return out, partial(loss_func, None)

    for step in range(opts["steps"]):
        sync()
        t0 = time.perf_counter()
        for c in chunks:
            c.zero_grad_buffer()
        optimizer.zero_grad()
        iters = [batches(step) for _ in range(vp)] if vp > 1 else batches(step)
        reduced = forward_backward(forward_step_func=forward_step, data_iterator=iters,
                                   model=chunks if vp > 1 else chunks[0], num_microbatches=plan.num_microbatches,
                                   seq_length=model_spec.seq_length, micro_batch_size=plan.micro_batch_size,
                                   decoder_seq_length=model_spec.seq_length, forward_only=False)
        optimizer.step()
        sync()
        seconds = time.perf_counter() - t0
        writer.step(step, pipeline_loss(reduced, last_stage, dp), seconds, tokens_per_step, peak_memory_bytes())


# ----------------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="workbench run: one rank")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None)  # the deepspeed launcher passes it
    args = parser.parse_args(argv)
    from workbench.runs.processes import watch_owner

    watch_owner()
    run_dir = Path(args.run_dir)
    rank = int(os.environ.get("RANK", "0"))
    writer = MetricsWriter(run_dir / "metrics" / f"rank{rank}.jsonl", rank)
    writer.write("start", pid=os.getpid(), local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                 world_size=int(os.environ.get("WORLD_SIZE", "1")))
    try:
        run, model_spec, _cluster, plan = load_run(run_dir)
        engine = run["options"]["engine"]
        if engine == "deepspeed" and (run["options"].get("hf") or {}).get("trainer") == "hf":
            train_hf_trainer(run, model_spec, plan, writer)
        elif engine == "deepspeed" and run["options"].get("hf"):
            train_hf(run, model_spec, plan, writer)
        elif engine == "deepspeed":
            train_deepspeed(run, model_spec, plan, writer, hybrid=False)
        elif engine == "megatron-deepspeed" and plan.pipeline_parallel > 1:
            train_hybrid_pipeline(run, model_spec, plan, writer)
        elif engine == "megatron-deepspeed":
            train_deepspeed(run, model_spec, plan, writer, hybrid=True)
        elif engine == "megatron":
            train_megatron(run, model_spec, plan, writer)
        else:
            raise ValueError(f"engine={engine!r} is not one of deepspeed, megatron, megatron-deepspeed")
        writer.done(peak_memory_bytes())
    except BaseException as exc:  # record why this rank stops, then let the launcher see the failure
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        kind = "oom" if is_oom(exc) else "terminated" if is_termination(exc) else "error"
        try:
            writer.write("error", kind=kind, message=f"{type(exc).__name__}: {str(exc)[:2000]}")
        finally:
            traceback.print_exc()
            sys.stderr.flush()
        return 3 if kind == "oom" else 1
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - teardown problems after "done" do not change the run's result
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
