"""DeepSpeed-Ulysses sequence parallelism (engine deepspeed, ``ulysses`` = N): rules, memory and time terms,
export/import, planner rows, advice."""
import numpy as np
import pytest

from workbench import advisor, planner
from workbench import timing as T
from workbench.catalog import model
from workbench.cli import main
from workbench.configs.deepspeed import build_ds_config, ulysses_snippet
from workbench.configs.importer import import_ds_config
from workbench.estimate import estimate
from workbench.specs import ClusterSpec, ParallelPlan, ulysses_head_limit, validate


def _c(nodes=2):
    return ClusterSpec(gpu="H100-SXM", gpus_per_node=8, num_nodes=nodes)


def _ds(n, **kw):
    kw.setdefault("zero_stage", 3)
    return ParallelPlan(world_size=16, engine="deepspeed", ulysses=n, global_batch_size=16, **kw)


def test_ulysses_is_the_all_to_all_split_and_its_rules_name_the_numbers():
    p = _ds(8)
    assert (p.context_parallel, str(p.cp_comm_type), p.data_parallel, p.is_ulysses) == (8, "a2a", 2, True)
    # a DeepSpeed plan with the all-to-all CP is the same plan
    assert ParallelPlan(world_size=16, engine="deepspeed", context_parallel=8, cp_comm_type="a2a") == \
        ParallelPlan(world_size=16, engine="deepspeed", ulysses=8)
    with pytest.raises(ValueError, match="set ulysses=4"):
        ParallelPlan(world_size=16, engine="deepspeed", context_parallel=4)
    with pytest.raises(ValueError, match="needs engine 'deepspeed'"):
        ParallelPlan(world_size=16, engine="megatron", ulysses=4)
    with pytest.raises(ValueError, match="all-to-all only"):
        ParallelPlan(world_size=16, engine="deepspeed", ulysses=4, cp_comm_type="all_gather")
    with pytest.raises(ValueError, match=r"does not divide world_size=16"):
        ParallelPlan(world_size=16, engine="deepspeed", ulysses=3)
    m = model("llama3-8b", seq_length=32768)  # 32 heads, 8 K/V heads
    assert ulysses_head_limit(m) == 8
    with pytest.raises(ValueError, match="num_query_groups=8 .*largest Ulysses size for llama3-8b is 8"):
        validate(m, _c(), _ds(16))
    with pytest.raises(ValueError, match="num_attention_heads=12"):
        validate(model("llama3-8b", num_attention_heads=12, num_query_groups=12, seq_length=32768), _c(), _ds(8))
    with pytest.raises(ValueError, match="does not divide seq_length=32764"):
        validate(m.replace(seq_length=32764), _c(), _ds(8))


def test_cli_refuses_in_one_line(capsys):
    rc = main(["estimate", "--model", "llama3-8b", "--seq", "32768", "--gpu", "H100-SXM", "--nodes", "2",
               "--engine", "deepspeed", "--ulysses", "16", "--zero", "3"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "ulysses=16 does not divide num_query_groups=8" in err
    import json

    assert main(["estimate", "--model", "llama3-8b", "--seq", "32768", "--gpu", "H100-SXM", "--nodes", "2",
                 "--engine", "deepspeed", "--ulysses", "8", "--zero", "3", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["ulysses"], plan["context_parallel"], plan["cp_comm_type"], plan["data_parallel"]) == (8, 8, "a2a", 2)


def test_memory_and_time_of_ulysses():
    m, c = model("llama3-8b", seq_length=65536), _c()
    u = estimate(m, c, _ds(8, recompute="full"))
    base = estimate(m, c, _ds(1, recompute="full"))
    # s/N tokens per rank for the whole layer: the kept layer inputs shrink N-fold
    ratio = base.memory.peak_stage.backward_activation_bytes / u.memory.peak_stage.backward_activation_bytes
    assert 7 < ratio <= 8.5
    # ZeRO-3 shards over all 16 ranks either way (DeepSpeed's sequence-data-parallel group)
    assert u.memory.stages[0].terms.optimizer == pytest.approx(base.memory.stages[0].terms.optimizer)
    # the exchange: per layer, forward and backward, the all-to-all of Q, K, V and O, not hidden — the formula of
    # Megatron's a2a context parallelism on the same ranks
    mg = estimate(m, c, ParallelPlan(world_size=16, engine="megatron", context_parallel=8, cp_comm_type="a2a",
                                     recompute="full", global_batch_size=16))
    assert u.time.breakdown["cp_comm"] == pytest.approx(mg.time.breakdown["cp_comm"])
    # 8 micro-batches x 32 layers x (forward, its recompute, backward) x the all-to-alls of Q, K, V and O: their
    # bytes at the link's bandwidth, and four calls' latency (DeepSpeed's DistributedAttention exchanges each
    # tensor in its own all-to-all)
    tok = 65536 / 8
    q, kv = tok * m.query_projection_size * 2, 2 * tok * m.kv_projection_size * 2
    link = u.time.links["cp"]
    assert (link["group_size"], link["link"]) == (8, "intra-node")
    one = T.all_to_all_seconds(2 * q + kv, 8, gb_per_s=link["gb_per_s"], latency_s=link["latency_s"]) \
        + 3 * link["latency_s"]
    assert T.A2A_CALLS_PER_DIRECTION == 4
    assert u.time.breakdown["cp_comm"] == pytest.approx(8 * 32 * 3 * one)
    # across nodes (N = 16 over 2 nodes would need 16 | heads: use a 16-K/V-head model) the all-to-all is slower
    wide = model("llama3-8b", num_query_groups=16, seq_length=65536)
    t8, t16 = (estimate(wide, c, _ds(n, recompute="full")).time for n in (8, 16))
    assert (t8.links["cp"]["link"], t16.links["cp"]["link"]) == ("intra-node", "inter-node")
    assert t16.breakdown["cp_comm"] > 4 * t8.breakdown["cp_comm"]


def test_export_import_and_the_model_code_snippet():
    m, c = model("llama3-8b", seq_length=65536), _c()
    cfg = build_ds_config(m, c, _ds(8))
    assert cfg["sequence_parallel_size"] == 8 and cfg["train_batch_size"] == 16
    assert cfg["gradient_accumulation_steps"] == 8  # 16 = 1 x 8 x DP 2
    back = import_ds_config(cfg, world_size=16)
    assert back.plan_fields["ulysses"] == 8 and back.plan_fields["world_size"] == 16
    assert back.options["data_parallel"] == 2 and not back.warnings
    assert ParallelPlan(**back.plan_fields) == ParallelPlan(world_size=16, engine="deepspeed", ulysses=8,
                                                             zero_stage=3, global_batch_size=16, overlap_comm=True)
    text = ulysses_snippet(m, _ds(8))
    assert "DistributedAttention(" in text and "initialize_sequence_parallel(sequence_parallel_size=8)" in text
    assert "mpu=mpu" in text and "8192 of 65536 tokens" in text
    compile(text.replace("self.", "self_"), "snippet", "exec")
    from workbench.configs.importer import import_megatron_args

    mds = import_megatron_args("deepspeed pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 "
                               "--seq-length 8192 --micro-batch-size 1 --ds-sequence-parallel-size 4 --deepspeed")
    assert any("--ds-sequence-parallel-size 4" in w and "--ulysses N" in w for w in mds.warnings)
    hf = model("llama3-8b", seq_length=65536, implementation="transformers", attention="flash")
    assert "register_with_transformers" in ulysses_snippet(hf, _ds(8))


def test_planner_searches_ulysses_against_zero3_and_recompute():
    m, c = model("llama3-8b", seq_length=65536), _c()
    table = planner.enumerate_candidates(m, c, 16, engines=("deepspeed",), zero_stages=(3,), offload=False)
    ds = table["cp"] > 1
    assert set(table["cp"][ds].tolist()) == {2, 4, 8}  # gcd(32 heads, 8 K/V heads) = 8
    assert (table["cp_comm"][ds] == T.CP_COMM_CODES["a2a"]).all() and (table["cp_a2a"][ds] == table["cp"][ds]).all()
    assert (table["tp"][ds] == 1).all() and (table["pp"][ds] == 1).all()
    res = planner.search(m, c, global_batch_size=16, engines=("deepspeed",), top=3)
    best = res.ranked[0]
    assert best.plan.is_ulysses
    assert best.step_seconds == pytest.approx(estimate(m, c, best.plan).time.step_seconds, rel=1e-9)
    assert "Long context: at 65,536 tokens, Ulysses=" in res.explanation and "ZeRO-3 + recompute=full" in \
        res.explanation
    # the advisor: a ZeRO-3 plan that does not fit at 128k is pointed at Ulysses, and told the heads cap it at 8
    long = m.replace(seq_length=131072)
    found = advisor.ulysses_choice(long, c, _ds(1), estimate(long, c, _ds(1)))
    assert found.status == "warn" and "Ulysses8" in found.suggestion and "cap Ulysses at 8" in found.message


def test_parallel_panel_sets_and_clears_ulysses():
    from widgets.parallel_panel import ParallelPanel
    from widgets.state import initial_state, reduce

    box = {"state": initial_state(plan={"engine": "deepspeed", "pipeline_parallel": 1, "zero_stage": 3})}
    panel = ParallelPanel()

    def dispatch(action):
        box["state"] = reduce(box["state"], action)
        panel.show(box["state"])

    panel.set_dispatch(dispatch)
    try:
        panel.show(box["state"])
        panel.controls["ulysses"].value = 4
        state = box["state"]
        assert state.valid and state.plan.is_ulysses and state.plan.context_parallel == 4
        assert "Ulysses 4 (all-to-all)" in panel.derived.value and state.estimate.time.breakdown["cp_comm"] > 0
        panel.controls["ulysses"].value = 3
        assert not box["state"].valid and "ulysses=3" in panel.error.value
        panel.controls["ulysses"].value = 1
        assert box["state"].valid and box["state"].plan.context_parallel == 1
    finally:
        panel.close()
