"""Pinned numbers of ``workbench estimate --json`` for eight varied plans, so a change meant to make the estimate
faster (or tidier) cannot move a number unnoticed. A change that is meant to move numbers updates these pins and
says why in its commit. Also: the scalar fast paths of :mod:`workbench.npscalar` give numpy's own results."""
import itertools
import json

import numpy as np
import pytest

from workbench import cli, npscalar

# (estimate arguments, per-GPU peak bytes, host bytes per GPU, step seconds, non-zero step-time terms)
# 2026-12-07: the H100's fused optimizer step at its own measured bandwidth (efficiency.json gpu_kernels
# optimizer_hbm_scale 1.149, benchmarks/gpu_deepspeed_step.py --scale): steps on the default H100 move by -1.3 to 0 %
# 2026-12-05: host bytes are the process's resident set (workbench.memory.host_resident_bytes: the process itself,
# 2.0 GiB, and DeepSpeed's offload buffers as the host holds them, page-locked ones rounded up to a power of two),
# where they were the offloaded states alone
PINNED = [
    ('--model guide-13b --gpu A100-80GB --gpus-per-node 8 --engine megatron --tp 4 --pp 2 --gbs 64',
     # 2026-12-05: the pipeline bubble of the stages as they are (schedule.bubble_seconds), not (p-1) x the slowest
     # 2026-12-04: megatron-core's reserve refitted after fit11 (10.9 -> 10.2 %)
     58538354380, 2143649792, 9.121341222989642,
     {'compute': 8.065112147990025, 'tp_comm': 0.87588864, 'pp_comm': 0.012659573333333334, 'optimizer': 0.03234966159882295, 'bubble': 0.13533120006746024}),
    ('--model llama2-7b --engine deepspeed --zero 3 --offload-optimizer cpu --offload-params cpu --gbs 32',
     # 2026-12-07: the H100's own layer-kernel constants (efficiency.json gpu_kernels: memory-bound layer kernels at
     # 0.797 of its datasheet where the H200's reach 0.661, transformers' GEMM scale 0.830)
     # 2026-12-03: ZeRO-3 keeps parameters gathered through the forward (the coordinator walk, +2.0 GiB) and the
     # parameter-offload host factor (0.254, not optimizer offload's 0.809; no upload of the updated parameters).
     # 2026-12-04: the allocator reserve of ZeRO-3 with the parameters on the host (35.2 %, its fit-split median, was
     # ZeRO-3's 20.5 %) and that host factor refitted on five fit shapes (0.254 -> 0.070); then that reserve taken on
     # the streams' caches together (the model built whole, the gathered peak, the reduction copies: 10.4 %, 19.9 %
     # once fit10 added runs with the parameters alone on the host)
     38516829202, 23190018048, 3.5589438762563983,
     {'compute': 1.2549762044629196, 'dp_comm': 0.003474363555555556, 'zero3_hooks': 1.6637556038236474, 'offload': 0.6059912044142757, 'optimizer': 0.0307465}),
    ('--model mixtral-8x7b --engine megatron --tp 2 --pp 2 --ep 4 --sp --gbs 64 --nodes 2 --distributed-optimizer',
     # 2026-12-07: the H100's own layer-kernel constants (efficiency.json gpu_kernels: memory-bound layer kernels at
     # 0.797 of its datasheet where the H200's reach 0.661, transformers' GEMM scale 0.830)
     # 2026-12-05: the pipeline bubble of the stages as they are (schedule.bubble_seconds), not (p-1) x the slowest
     # 2026-12-04: megatron-core's reserve refitted after fit11 (10.9 -> 10.2 %)
     222862412742, 2143649792, 27.37978427923456,
     {'compute': 23.90891219472659, 'tp_comm': 0.3920148707555556, 'ep_comm': 1.3566920476444446, 'pp_comm': 0.10208895004444445, 'dp_comm': 0.0050617472, 'optimizer': 0.03910404499175142, 'bubble': 1.5759104238717754}),
    ('--model llama3-8b --engine megatron --tp 2 --gbs 32 --precision fp8 --attention flash --distributed-optimizer --fp8-param-gather',
     # 2026-12-07: the H100's own layer-kernel constants (efficiency.json gpu_kernels: memory-bound layer kernels at
     # 0.797 of its datasheet where the H200's reach 0.661, transformers' GEMM scale 0.830)
     # 2026-12-04: megatron-core's reserve refitted after fit11 (10.9 -> 10.2 %)
     73542247511, 2143649792, 2.52886235684181,
     {'compute': 2.254372733974804, 'tp_comm': 0.2123276344888889, 'dp_comm': 0.04296042882860639, 'optimizer': 0.01920155954951093}),
    ('--model llama2-7b --engine deepspeed --zero 2 --lora-rank 16 --gbs 16',
     # 2026-12-07: the H100's own layer-kernel constants (efficiency.json gpu_kernels: memory-bound layer kernels at
     # 0.797 of its datasheet where the H200's reach 0.661, transformers' GEMM scale 0.830)
     48019545838, 2143649792, 0.49787050946031863,  # 2026-12-04: ZeRO-0/1/2's reserve refreshed, 17.1 -> 16.6 %
     {'compute': 0.4663026977988176, 'dp_comm': 0.0006873333067993366, 'optimizer': 0.030880478354701688}),
    ('--model llama2-70b --engine megatron --tp 8 --pp 4 --first-stage-layers 14 --last-stage-layers 12 --gbs 64 --nodes 4',
     # 2026-12-07: the H100's own layer-kernel constants (efficiency.json gpu_kernels: memory-bound layer kernels at
     # 0.797 of its datasheet where the H200's reach 0.661, transformers' GEMM scale 0.830)
     # 2026-12-05: the pipeline bubble of the stages as they are (schedule.bubble_seconds), not (p-1) x the slowest
     # 2026-12-04: megatron-core's reserve refitted after fit11 (10.9 -> 10.2 %)
     100297468608, 2143649792, 12.010633236331506,
     {'compute': 8.812465910018181, 'tp_comm': 2.6695778303999997, 'pp_comm': 0.20251528391111112, 'optimizer': 0.03878411399399867, 'bubble': 0.28729009800821537}),
    ('--model llama2-7b --engine deepspeed --zero 3 --gbs 32 --expandable-segments --mbs 2',
     # 2026-12-07: the H100's own layer-kernel constants (efficiency.json gpu_kernels: memory-bound layer kernels at
     # 0.797 of its datasheet where the H200's reach 0.661, transformers' GEMM scale 0.830)
     # 2026-12-03: ZeRO-3's gathered parameters through the forward, +1.9 GB; 2026-12-05: the host holds each
     # rank's 16-bit partition once at init (DeepSpeed's defragment), +1.68 GB
     68056448614, 3828253696, 1.5161698214760106,
     {'compute': 1.2278226459000747, 'dp_comm': 0.003474363555555556, 'zero3_hooks': 0.23154325824320876, 'optimizer': 0.05332955377717158}),
    ('--model llama2-7b --engine deepspeed --zero 2 --ulysses 4 --gbs 16 --seq 16384 --attention flash',
     # 2026-12-07: the H100's own layer-kernel constants (efficiency.json gpu_kernels: memory-bound layer kernels at
     # 0.797 of its datasheet where the H200's reach 0.661, transformers' GEMM scale 0.830)
     # 2026-12-03: ZeRO-2's first bucket reduction fires at an attention weight, the layer's MLP block freed by then;
     # 2026-12-04: ZeRO-0/1/2's reserve refreshed to the fit split's median, 17.1 -> 16.6 %
     62639536050, 2143649792, 3.681953921285656,
     {'compute': 3.268814660552597, 'cp_comm': 0.16364557653333336, 'dp_comm': 0.19616413042255393, 'optimizer': 0.05332955377717158}),
]


@pytest.mark.parametrize("args, peak_bytes, host_bytes, step_seconds, breakdown", PINNED,
                         ids=[row[0].split()[1] + "-" + str(i) for i, row in enumerate(PINNED)])
def test_estimate_numbers_are_pinned(capsys, args, peak_bytes, host_bytes, step_seconds, breakdown):
    assert cli.main(["estimate", *args.split(), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory"]["per_gpu_peak_bytes"] == peak_bytes
    assert out["memory"]["host_bytes_per_gpu"] == host_bytes
    assert out["time"]["step_seconds"] == pytest.approx(step_seconds, rel=1e-12)
    assert {k: v for k, v in out["time"]["breakdown"].items() if v} == pytest.approx(breakdown, rel=1e-12)


# (estimate arguments, step seconds, dp_comm + zero3_hooks seconds): first pinned before ZeRO-3's per-module hooks
# and their HBM copies were taken out of dp_comm into their own term, zero3_hooks (the split moved no step and lost no
# second), re-pinned when the ZeRO-3 host constants were refitted per hook call and the transformers host floor landed,
# and when a layer's host time became a base plus a cost per dispatched operator (GPT-style megatron-core layers 4.03
# -> 4.026 ms: rows 0, 1, 4 and 13 move by 0.06-0.09 %), and when the layers' forward got its own host phase
# (timing.host_wait, forward share 0.53 measured) with megatron-core's base refitted 1.38 -> 1.22 ms and the
# per-operator cost 18.25 -> 17.75 us (GPT-style layer 4.026 -> 3.79 ms) and the host's wait judged against the
# kernels and the tensor-parallel collectives together (timing.host_wait_terms): rows 0, 1, 4 and 13 move by -9.5 to
# +6.3 % (row 13, t = 2: its collectives now hide host time); and when the H100 got its own layer-kernel constants
# (efficiency.json gpu_kernels, 2026-12-07: rows on the default H100 move by -4.4 to +0.5 %, ZeRO-3's host-bound
# steps not at all), and when its unfused score kernels got their own scale (score_hbm_scale 1.099, not the layer's
# 1.206: rows 1 and 4 move by +0.9 and +1.3 %; ZeRO-3's rows keep their host-bound steps, their communication and
# hooks less hidden behind a longer backward by 0.4-0.8 %), and when its fused optimizer step got its own measured
# bandwidth scale (optimizer_hbm_scale 1.149: the rows move by -0.4 to -0.01 %), and when ZeRO-0's DeepSpeed step got
# its own measured bytes (deepspeed.zero0_step_bytes_per_parameter 38.9, not 50.56: the ZeRO-0 rows move by -0.2 and
# -1.3 %)
BEFORE_ZERO3_SPLIT = [
    ('--model gpt3-125m --nodes 1 --gpus-per-node 1 --engine deepspeed --zero 0 --recompute none --mbs 1 --gbs 4',
     0.2104337106550797, 0.0),
    ('--model gpt3-125m --nodes 1 --gpus-per-node 1 --engine deepspeed --zero 2 --recompute full --mbs 2 --gbs 4',
     0.1491765263506902, 0.0007478348417910448),
    ('--model gpt3-125m --nodes 1 --gpus-per-node 1 --engine deepspeed --zero 3 --recompute none --mbs 1 --gbs 4',
     0.8198642447344686, 0.7239727481032056),
    ('--model gpt3-125m --nodes 1 --gpus-per-node 1 --engine deepspeed --zero 3 --recompute full --mbs 2 --gbs 4',
     0.6033011337613343, 0.48719138068484974),
    ('--model gpt3-125m --nodes 1 --gpus-per-node 8 --engine deepspeed --zero 1 --recompute none --mbs 2 --gbs 32',
     0.12200111055149473, 0.002025663108457711),
    ('--model gpt3-125m --nodes 1 --gpus-per-node 8 --engine deepspeed --zero 3 --recompute full --mbs 1 --gbs 32',
     1.4833272983868333, 1.3695319749233952),
    ('--model gpt3-125m --nodes 2 --gpus-per-node 8 --engine deepspeed --zero 3 --recompute none --mbs 2 --gbs 64',
     0.542181839239188, 0.449946700373527),
    ('--model llama2-7b --nodes 1 --gpus-per-node 1 --engine deepspeed --zero 3 --recompute full --mbs 1 --gbs 4',
     3.397998444581552, 1.528210665092547),
    ('--model llama2-7b --nodes 1 --gpus-per-node 8 --engine deepspeed --zero 2 --recompute none --mbs 1 --gbs 32',
     1.4240111947402572, 0.11570543650016585),
    ('--model llama2-7b --nodes 1 --gpus-per-node 8 --engine deepspeed --zero 3 --recompute none --mbs 2 --gbs 32',
     1.5161698214760106, 0.23501762179876431),
    ('--model llama2-7b --nodes 2 --gpus-per-node 8 --engine deepspeed --zero 3 --recompute full --mbs 1 --gbs 64',
     6.326767511019728, 4.626352634859511),
    ('--model llama2-7b --nodes 2 --gpus-per-node 8 --engine deepspeed --zero 0 --recompute full --mbs 2 --gbs 64',
     2.009100168919317, 0.20085292517414988),
    ('--model llama2-7b --engine deepspeed --zero 3 --offload-optimizer cpu --gbs 16 --nodes 1 --gpus-per-node 1',
     13.07021707889598, 3.9201652396050366),  # ZeRO-3 offload host factor 0.666 -> 0.809 (2026-12-01) -> 0.899
    ('--model gpt3-1.3b --engine megatron --tp 2 --pp 2 --gbs 32',
     0.7895718154922954, 0.0039984448),  # 2026-12-05: the bubble of the stages as they are (last: output layer)
    ('--model llama2-7b --engine deepspeed --zero 3 --lora-rank 16 --gbs 16',
     3.2814816354916836, 2.784298459338164),  # 2026-12-06: the hooks of LoRA's modules (1.4215 s before; final57)
    ('--model llama2-7b --engine deepspeed --zero 3 --no-overlap-comm --gbs 32 --nodes 2',
     3.1864878350318695, 2.516961705911824),
]


@pytest.mark.parametrize("args, step_seconds, dp_comm_before", BEFORE_ZERO3_SPLIT,
                         ids=[f"zero3-split-{i}" for i in range(len(BEFORE_ZERO3_SPLIT))])
def test_zero3_hooks_split_moves_no_step(capsys, args, step_seconds, dp_comm_before):
    assert cli.main(["estimate", *args.split(), "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["time"]
    b = t["breakdown"]
    assert t["step_seconds"] == pytest.approx(step_seconds, rel=1e-12)
    assert sum(b.values()) == pytest.approx(t["step_seconds"], rel=1e-12)
    assert b["dp_comm"] + b["zero3_hooks"] == pytest.approx(dp_comm_before, rel=1e-12, abs=1e-18)
    zero3 = "--zero 3" in args
    assert (b["zero3_hooks"] > 0) is zero3
    if zero3 and "--gpus-per-node 1" in args and "--nodes 1" in args:
        assert b["dp_comm"] == 0.0  # one rank: no data-parallel traffic at all


VALUES = [0, 1, -3, True, False, np.int64(5), np.bool_(True), 0.0, -0.0, 2.5, np.float64(-1.5), float("inf"),
          float("nan"), np.array([1.5, -0.0]), np.array([1, 2]), np.array([True, False]), np.array([[1.0, 2.0]])]


def _same(expected, got):
    expected, got = np.asarray(expected), np.asarray(got)
    return (expected.dtype == got.dtype and expected.shape == got.shape
            and np.array_equal(expected, got, equal_nan=True) and np.array_equal(np.signbit(expected), np.signbit(got)))


def test_npscalar_gives_numpys_results():
    for cond in (True, False, np.bool_(False), 0, 2.0, np.array([True, False])):
        for a, b in itertools.product(VALUES, VALUES):
            assert _same(np.where(cond, a, b), npscalar.where(cond, a, b)), (cond, a, b)
            if np.ndim(np.where(cond, a, b)) == 0:
                expected, got = np.where(cond, a, b).item(), npscalar.where_item(cond, a, b)
                assert type(expected) is type(got) and (expected == got or expected != expected), (cond, a, b)
    for a, b in itertools.product(VALUES, VALUES):
        assert _same(np.maximum(a, b), npscalar.maximum(a, b)), (a, b)
        assert _same(np.minimum(a, b), npscalar.minimum(a, b)), (a, b)
    for x in (0, 1, 2, 3, np.int64(2), 2.0, True, np.array([0, 1, 2])):
        assert _same(np.isin(x, (1, 2)), npscalar.isin(x, (1, 2))), x
