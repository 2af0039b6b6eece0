"""DeepSpeed-MoE on CPU: a real ``deepspeed.moe.layer.MoE`` trained one step by ZeRO-2 over four gloo processes with
``ep_size=2``, against the workbench's DeepSpeed-MoE formulas (``workbench/dsmoe.py``, ``workbench/memory.py``):

* the fp32 partition each rank's ZeRO-2 optimizer holds: the dense parameters (input linear and the gate) split over
  the data-parallel group (4), the rank's local experts (E / ep = 2) split over the expert-data-parallel group
  (world ÷ ep = 2);
* the rows the local experts receive after the dispatch all-to-all: [ep, E/ep, C, h] with DeepSpeed's capacity C.

CPU only (torch's gloo backend, ``torch_adam``: no DeepSpeed op is compiled); about 20 s on two cores. It checks placement and
shapes, not GPU memory or time. Run from the checkout root::

    python benchmarks/deepspeed_moe_cpu.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HIDDEN, FFN, EXPERTS, TOP_K, EP, WORLD, MICRO_BATCH, SEQ = 32, 64, 4, 2, 2, 4, 2, 24


def worker() -> None:
    import torch
    import deepspeed
    from deepspeed.moe.layer import MoE
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(HIDDEN, HIDDEN)
            expert = torch.nn.Sequential(torch.nn.Linear(HIDDEN, FFN), torch.nn.GELU(), torch.nn.Linear(FFN, HIDDEN))
            self.moe = MoE(hidden_size=HIDDEN, expert=expert, num_experts=EXPERTS, ep_size=EP, k=TOP_K)

        def forward(self, x):
            y, aux, _ = self.moe(self.inp(x))
            return y.float().pow(2).mean() + 0.01 * aux

    model = Net()
    params = split_params_into_different_moe_groups_for_optimizer({"params": list(model.parameters()), "name": "p"})
    cfg = {"train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
           "zero_optimization": {"stage": 2}}
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=cfg)
    rows = []
    engine.module.moe.deepspeed_moe.experts.register_forward_pre_hook(lambda m, a: rows.append(list(a[0].shape)))
    loss = engine(torch.randn(MICRO_BATCH, SEQ, HIDDEN, dtype=torch.bfloat16))
    engine.backward(loss)
    engine.step()
    moe_group = [i for i, g in enumerate(opt.optimizer.param_groups) if g.get("moe")]
    parts = [int(p.numel()) for p in opt.single_partition_of_fp32_groups]
    result = dict(rank=int(os.environ["RANK"]), dense_partition=sum(p for i, p in enumerate(parts) if i not in moe_group),
                  expert_partition=sum(parts[i] for i in moe_group), expert_rows=rows[0])
    with open(os.path.join(os.environ["DSMOE_OUT"], f"rank{result['rank']}.json"), "w") as fh:
        json.dump(result, fh)


def predicted() -> dict:
    from workbench import dsmoe
    from workbench import memory as M
    from workbench.specs import ModelSpec

    m = ModelSpec(name="toy-moe", num_layers=1, hidden_size=HIDDEN, num_attention_heads=2, ffn_hidden_size=FFN,
                  vocab_size=64, seq_length=SEQ, num_experts=EXPERTS, moe_top_k=TOP_K, activation="gelu",
                  add_bias_linear=True)
    dense = HIDDEN * HIDDEN + HIDDEN + HIDDEN * EXPERTS  # the input linear and the bias-free gate
    capacity = int(dsmoe.expert_capacity(MICRO_BATCH * SEQ, num_experts=EXPERTS, top_k=TOP_K))
    return dict(dense_partition=dense // WORLD,
                expert_partition=int(M.expert_params_per_rank(m, EP, 1)) // (WORLD // EP),
                expert_rows=[EP, EXPERTS // EP, capacity, HIDDEN])


def main() -> int:
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "DSMOE_OUT": out, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD),
                               __file__, "--worker"], env=env, capture_output=True, text=True, timeout=600)
        results = [json.loads(p.read_text()) for p in sorted(Path(out).glob("rank*.json"))]
    for leftover in Path("/dev/shm").glob("deepspeed_allreduce_buffer_*"):
        leftover.unlink(missing_ok=True)
    if proc.returncode or len(results) != WORLD:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        return 1
    want = predicted()
    ok = True
    for r in results:
        for key, value in want.items():
            same = r[key] == value
            ok &= same
            print(f"rank {r['rank']} {key:17s} DeepSpeed {r[key]!s:18s} workbench {value!s:18s} "
                  f"{'ok' if same else 'DIFFERS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    else:
        sys.exit(main())
