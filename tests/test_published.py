"""benchmarks/bench_published.py: published large runs stay within their recorded bands, the planner ranks a
published layout, and the README's table is the benchmark's current output."""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_published as B  # noqa: E402

CASES = {c["id"]: c for c in B.load()["cases"]}

# predicted / published step time as the models give it today (bench_published.py); a change outside the band is
# a change in the time model that this table must follow
BANDS = {"korthikanti-22B": (0.97, 1.07), "narayanan-1008B": (0.96, 1.06), "llama3-405b-8192-cp1": (0.88, 0.98)}


@pytest.mark.parametrize("case_id", sorted(BANDS))
def test_ratio_in_band(case_id):
    row = B.evaluate_case(CASES[case_id], planner=False)
    low, high = BANDS[case_id]
    assert low <= row.ratio <= high, (case_id, row.ratio)


def test_every_case_has_a_cited_source():
    data = B.load()
    for case in data["cases"]:
        src = data["sources"][case["source"]]
        assert src["url"].startswith("https://") and src["where"] and src["read"].startswith("2026-"), case["id"]
        assert case["published"]["metric"] in B._UNITS


def test_published_step_recovers_the_source_metric():
    # Narayanan et al. 2021 Table 1: 1T at 163 TFLOP/s per GPU on 3072 GPUs (502 PFLOP/s in the abstract)
    case = CASES["narayanan-1008B"]
    model, cluster, plan = B.specs(case)
    step = B.published_step_seconds(case, model, cluster, plan)
    assert B.megatron_flops(model, plan, hardware=True) / step / 1e15 == pytest.approx(163 * 3072 / 1000)


def test_missing_features_are_named():
    row = B.evaluate_case(CASES["bridge-25.11-qwen3-30b-a3b-16"], planner=False)
    expected = [f for f in ("fp8", "ep") if f in B.missing_features(CASES["bridge-25.11-qwen3-30b-a3b-16"])]
    assert list(row.missing) == expected
    if expected:
        line = B.table_lines([row])[1]
        assert "not modelled: needs " + "/".join(expected) in line


def test_planner_rank_of_a_published_layout():
    row = B.evaluate_case(CASES["korthikanti-22B"], planner=True)
    r = row.rank
    assert r.in_search_space and r.evaluated > r.feasible > 0
    assert r.result.step_seconds == pytest.approx(row.predicted_step_seconds, rel=1e-9)
    # the layout of Korthikanti et al.'s 22B run fits on the point estimate (63.8 GiB of 80) and is ranked
    assert r.fits and r.rank is not None and 1 <= r.rank <= r.feasible
    # the held-out band only marks: excluding risky plans can only move a non-risky plan up
    assert (r.rank_within_band is None) == r.risky
    if not r.risky:
        assert r.rank_within_band <= r.rank


def test_readme_table_is_current():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Checked against published runs"):]
    readme = [ln for ln in section[:section.index("\n## ", 5)].splitlines() if ln.startswith("| ")][1:]
    rows = {c: B.evaluate_case(CASES[c], planner=c in {"korthikanti-22B"}) for c in CASES}
    for line in readme:
        case_id = line.split("|")[1].strip()
        expected = B.table_lines([rows[case_id]], markdown=True)[-1]
        if case_id != "korthikanti-22B":  # planner ranks of the large clusters: the benchmark itself checks them
            line, expected = (re.sub(r"\|[^|]*\|$", "|", x) for x in (line, expected))
        assert line == expected, f"{case_id}: run python benchmarks/bench_published.py --write-readme"
    assert len(readme) == len(CASES)


def test_readme_summary_is_current():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Checked against published runs"):]
    rows = [B.evaluate_case(c, planner=False) for c in CASES.values()]
    for line in B.summary_lines(rows):  # the planner line needs every rank: the benchmark prints it
        assert line in section, f"{line!r}: run python benchmarks/bench_published.py --write-readme"


def test_planner_searches_fp8_on_megatron_only():
    from workbench import catalog, planner
    from workbench.specs import ClusterSpec

    cluster = ClusterSpec(gpu=catalog.gpu("H100-SXM"), gpus_per_node=8, num_nodes=1)
    found = planner.search(catalog.model("llama2-7b"), cluster, global_batch_size=128, precision="fp8",
                           fp8_recipe="tensorwise", top=3)
    assert all(str(r.plan.engine) == "megatron" and str(r.plan.fp8_recipe) == "tensorwise" for r in found.ranked)
    with pytest.raises(ValueError, match="fp8 is not supported by gpu=A100-80GB"):
        planner.search(catalog.model("llama2-7b"), ClusterSpec(gpu=catalog.gpu("A100-80GB")), global_batch_size=128,
                       precision="fp8")
    row = B.evaluate_case(CASES["nemo-longseq-llama2-7b-1024k"], planner=True)
    assert row.rank.result.step_seconds == pytest.approx(row.predicted_step_seconds, rel=1e-9)


def test_write_readme_replaces_only_table_and_summary(tmp_path):
    readme = tmp_path / "README.md"
    original = (ROOT / "README.md").read_text()
    readme.write_text(original.replace("| korthikanti-22B |", "| korthikanti-22B | stale |", 1))
    rows = [B.evaluate_case(c, planner=False) for c in list(CASES.values())[:3]]
    B.write_readme(rows, readme)
    text = readme.read_text()
    section = text[text.index(B.SECTION):text.index("\n## ", text.index(B.SECTION) + 5)]
    assert [ln for ln in section.splitlines() if ln.startswith("| ")] == B.table_lines(rows, markdown=True)[:1] + \
        B.table_lines(rows, markdown=True)[2:]
    assert "\n".join(B.summary_lines(rows)) in section and "stale" not in text
    assert text.replace(section, "") == original.replace(original[original.index(B.SECTION):original.index(
        "\n## ", original.index(B.SECTION) + 5)], "")


def test_rank_among_the_features_the_run_had():
    """A 2021 run competes only with plans that 2021's Megatron-LM could run: no sequence parallelism, selective
    recompute or distributed optimizer."""
    row = B.evaluate_case(CASES["narayanan-310.1B"], planner=True)
    f, full = row.feature_rank, row.rank
    assert f is not None and f.in_search_space and f.evaluated < full.evaluated
    best = f.best.plan
    assert not best.sequence_parallel and not best.distributed_optimizer and str(best.recompute) != "selective"
    assert str(best.engine) == "megatron"
    assert "2021 features: " in B.rank_text(row)


def test_recipe_features_reach_the_plan():
    # Megatron-Bridge's H100 fp8_cs setting keeps the weights in FP8 (fp8_param_gather) and its Qwen3 configs overlap
    # the expert-parallel all-to-alls: the case's layout says so and the evaluated plan carries both
    _, _, plan = B.specs(CASES["bridge-25.11-qwen3-235b-a22b-256"])
    assert plan.fp8_param_gather and plan.moe_overlap_alltoall and plan.fp8_recipe == "tensorwise"
    _, _, plan = B.specs(CASES["nemo24.07-llama3-8b-8"])  # NeMo 24.07's launcher scripts set neither
    assert not plan.fp8_param_gather and not plan.moe_overlap_alltoall
    for case in CASES.values():  # every recipe feature in a layout is backed by a cited recipe line
        if case["layout"].get("fp8_param_gather") or case["layout"].get("moe_a2a_overlap"):
            assert any("https://github.com/" in line for line in case.get("recipe", ())), case["id"]


def test_release_spread_names_the_same_run_published_twice():
    # Megatron-Bridge's 25.09 and 25.11 H100 tables publish Qwen3-30B-A3B on the same 16 GPUs and layout at
    # 10,494 and 5,275 tok/s/GPU: the spread line gives both and their step-time ratio
    rows = [B.Row(case=CASES[i], missing=(), published_step_seconds=s, predicted_step_seconds=11.4)
            for i, s in (("bridge-25.09-qwen3-30b-a3b-16", 12.49), ("bridge-25.11-qwen3-30b-a3b-16", 24.85))]
    rows.append(B.Row(case=CASES["korthikanti-22B"], missing=(), published_step_seconds=1.1, predicted_step_seconds=1.1))
    lines = B.release_spread_lines(rows)
    assert len(lines) == 2 and lines[0].startswith("same run")
    assert "qwen3-30b-a3b" in lines[1] and "10,494 (bridge-25.09)" in lines[1] and "5,275 (bridge-25.11)" in lines[1]
    assert "×1.99" in lines[1]
    assert B.release_spread_lines(rows[:1] + rows[2:]) == []
    # 25.09 ran the Qwen3 MoE rows with token drop (capacity factor 1, padded) and without the all-to-all overlap that
    # 25.11 turned on: still one run, the switches named; the plan of 25.09 carries the capacity
    rows = [B.Row(case=CASES[i], missing=()) for i in ("bridge-25.09-qwen3-30b-a3b-16", "bridge-25.11-qwen3-30b-a3b-16")]
    assert B._same_run_key(rows[0].case) == B._same_run_key(rows[1].case)
    assert B._switches_text(rows) == ("; recipe differs: moe_a2a_overlap on in bridge-25.11; moe_capacity_factor on in "
                                      "bridge-25.09; moe_pad_to_capacity on in bridge-25.09")
    _, _, plan = B.specs(CASES["bridge-25.09-qwen3-30b-a3b-16"])
    assert plan.moe_capacity_factor == 1.0 and plan.moe_pad_to_capacity and not plan.moe_overlap_alltoall
    _, _, plan = B.specs(CASES["bridge-25.11-qwen3-30b-a3b-16"])
    assert plan.moe_capacity_factor is None and not plan.moe_pad_to_capacity


def test_memory_attribution_adds_up_to_the_peak():
    # the peak of a layout judged not to fit splits into the allocated terms, the memory outside the allocator and
    # the allocator's reserve (a fraction of allocated); the line names each part
    row = B.evaluate_case(CASES["nemo24.07-llama3-8b-8"], planner=False)
    m = row.memory
    assert m["allocated"] + m["outside"] + m["reserve"] == pytest.approx(m["peak"], rel=1e-9)
    assert m["reserve"] == pytest.approx(m["reserve_fraction"] * m["allocated"], rel=1e-6)
    assert sum(m["terms"].values()) == pytest.approx(m["allocated"], abs=8)
    assert B.over_limit(row) and m["allocated"] < m["limit"] < m["peak"]
    lines = B.memory_lines([row])
    assert lines[0].startswith("nemo24.07-llama3-8b-8: peak ") and "allocated alone leaves" in lines[0]
    assert lines[-1].startswith("of the 1 layouts over the limit, the allocated terms alone fit 1")


def test_every_layout_over_the_memory_limit_carries_its_audit():
    # a published layout the workbench says does not fit names, in its memory_note, what the sources say of each
    # term; a new case over the limit (or a model change that puts one over) needs that note
    rows = [B.evaluate_case(c, planner=False) for c in CASES.values()]
    over = [r.case["id"] for r in rows if B.over_limit(r)]
    assert over, "no published layout over the limit: the memory_note of the cases may be stale"
    missing = [i for i in over if not CASES[i].get("memory_note")]
    assert not missing, f"published layouts over the memory limit without a memory_note: {missing}"
