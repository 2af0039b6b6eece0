"""ATen ops one decoder layer dispatches in a training micro-step (forward + loss + backward), counted on the CPU.

A layer's host time in eager PyTorch — its Python forward and the launches of its autograd backward — grows with the
operators it dispatches: each one passes through the dispatcher, records an autograd node and (on a GPU) launches a
kernel. Layers of different designs dispatch very different numbers of them (megatron-core's local spec: a
GPT-style LayerNorm / GeLU / learned-position layer about 74 compute ops and 80 views per forward + backward, a
Llama-style RMSNorm / SwiGLU / rotary layer about twice as many compute ops), so one host constant per stack cannot fit
both.

This script builds each shape of the measurement corpus (``benchmarks/corpus/runs.py``: megatron-core ``GPTModel``
with the local layer spec, as ``measure.py`` builds it, and transformers models with the corpus configs) shrunk to a
few heads of width 8, at one and at two layers, runs two forward + backward passes in bf16 and counts, in the second
pass, every ATen op that reaches the dispatcher (``TorchDispatchMode``), split into views (aliases: no kernel) and
the rest. One layer's count is the difference between the two models. Counts do not depend on the widths (they are
the same ops at any size); they depend on the layer's design and on the library versions, recorded with them.

    python benchmarks/count_layer_ops_cpu.py --out benchmarks/results/layer_ops_cpu.jsonl
    python benchmarks/count_layer_ops_cpu.py --shapes mc-h768-gelu,hf-llama-h2048 --out /tmp/ops.jsonl
    python benchmarks/count_layer_ops_cpu.py --catalog benchmarks/results/layer_ops_cpu.jsonl

``--catalog`` groups counted shapes by layer design (:func:`workbench.layerops.layer_features` of the shape's
``ModelSpec``, built as ``benchmarks/bench_accuracy.py`` builds it) and writes one entry per design, the median
count over its shapes, into ``workbench/catalog/efficiency.json`` ``layer_ops.layers``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

HEAD = 8  # head width of the shrunken models
SEQ, VOCAB = 64, 256


def counter():
    """A ``TorchDispatchMode`` that counts dispatched ATen ops: ``(mode, counts)``, counts ``{"ops", "views"}``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = {"ops": 0, "views": 0}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts["views" if func.is_view else "ops"] += 1
            return func(*args, **(kwargs or {}))

    return Count(), counts


def shrink_mcore(dims: dict, layers: int) -> dict:
    """The megatron-core corpus dimensions at ``layers`` layers, heads of width :data:`HEAD`."""
    d = {k: v for k, v in dims.items() if k != "like"}
    heads = d["num_attention_heads"]
    d.update(num_layers=layers, hidden_size=HEAD * heads, ffn_hidden_size=2 * HEAD * heads, seq_length=SEQ,
             vocab_size=VOCAB)
    if d.get("kv_channels"):
        d["kv_channels"] = HEAD
    if d.get("num_moe_experts"):
        d["moe_ffn_hidden_size"] = HEAD * heads
    return d


def shrink_hf(config: dict, layers: int) -> dict:
    """The transformers corpus config at ``layers`` layers, heads of width :data:`HEAD`."""
    c = dict(config)
    heads = c.get("num_attention_heads") or c["n_head"]
    width = HEAD * heads
    for key in ("hidden_size", "n_embd"):
        if key in c:
            c[key] = width
    if "head_dim" in c:
        c["head_dim"] = HEAD
    for key in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"):
        if key in c:
            c[key] = 2 * width
    from runs import hf_config_with_layers

    c = hf_config_with_layers(c, layers)
    if "query_pre_attn_scalar" in c:
        c["query_pre_attn_scalar"] = HEAD
    c["vocab_size"] = VOCAB
    return c


def count_mcore(dims: dict, layers: int) -> dict:
    from trace_activations_cpu import cpu_mcore_model, mcore_batch

    model = cpu_mcore_model(shrink_mcore(dims, layers))
    tokens, pos, mask = mcore_batch(SEQ, VOCAB)
    for _ in range(2):
        for p in model.parameters():
            p.grad = None
        mode, counts = counter()
        with mode:
            model(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean().backward()
    return counts


def count_hf(config: dict, layers: int, attn: str) -> dict:
    import torch

    import measure

    model = measure.build_hf({"config": shrink_hf(config, layers)}, {"attn": attn})[0]
    model.train()
    ids = torch.randint(0, VOCAB, (1, SEQ))
    for _ in range(2):
        for p in model.parameters():
            p.grad = None
        mode, counts = counter()
        with mode:
            model(input_ids=ids, labels=ids).loss.backward()
    return counts


def hf_dense_configs() -> list:
    """``(shape_id, attn, config)`` for every dense transformers corpus config (``runs.HF_SHAPES``, MoE left out)
    with each attention implementation transformers gives its family (Gemma 2: eager only)."""
    import runs

    out = []
    for sid, shape in runs.HF_SHAPES.items():
        cfg = shape["config"]
        if any(k in cfg for k in ("num_local_experts", "num_experts")):
            continue
        for attn in ("eager",) if cfg["model_type"] == "gemma2" else ("sdpa", "eager"):
            out.append((sid, attn, cfg))
    return out


def versions() -> dict:
    import torch

    out = {"torch": torch.__version__}
    for name in ("transformers", "megatron.core"):
        try:
            mod = __import__(name, fromlist=["__version__"])
            out[name] = getattr(mod, "__version__", "?")
        except ImportError:
            pass
    return out


def shape_model(sid: str, attn):
    """The ``ModelSpec`` of corpus shape ``sid`` (with ``attn`` for transformers shapes), as the accuracy benchmark
    describes its runs."""
    import runs
    from bench_accuracy import hf_shape_spec, mcore_shape_spec

    if sid in runs.MCORE_SHAPES:
        return mcore_shape_spec(sid, {k: v for k, v in runs.MCORE_SHAPES[sid].items() if k != "like"})
    shape = runs.HF_SHAPES[sid]
    return hf_shape_spec(sid, shape["config"], shape["seq_length"], attn)


def write_catalog(counts: Path) -> list:
    """Group the counted shapes of ``counts`` by layer design and store one entry per design (median count over its
    shapes, the shapes, the library versions) in the catalog's ``layer_ops.layers``; return the entries."""
    import statistics

    from workbench import layerops

    groups: dict = {}
    versions = {}
    for line in counts.read_text().splitlines():
        rec = json.loads(line)
        feats = layerops.layer_features(shape_model(rec["shape_id"], rec["attn"]))
        key = tuple(feats[f] for f in layerops.FEATURES)
        groups.setdefault(key, []).append(rec)
        versions = rec["versions"]
    entries = []
    for key, recs in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        entries.append(dict(zip(layerops.FEATURES, key),
                            ops=int(statistics.median_low([r["ops_per_layer"] for r in recs])),
                            views=int(statistics.median_low([r["views_per_layer"] for r in recs])),
                            shapes=sorted({r["shape_id"] for r in recs})))
    path = ROOT / "workbench" / "catalog" / "efficiency.json"
    cal = json.loads(path.read_text())
    section = cal.setdefault("layer_ops", {})
    section["layers"] = entries
    section["versions"] = versions
    path.write_text(json.dumps(cal, indent=2, ensure_ascii=False) + "\n")
    return entries


def main(argv=None) -> int:
    import runs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write one record per counted shape (JSON lines)")
    ap.add_argument("--catalog", type=Path, help="store the counts of this JSON-lines file in the catalog, by layer "
                                                 "design, and count nothing")
    ap.add_argument("--shapes", default="", help="comma-separated shape ids (default: every dense corpus shape)")
    args = ap.parse_args(argv)
    if args.catalog:
        for e in write_catalog(args.catalog):
            print(f"{e['implementation']:12s} ops {e['ops']:4d} views {e['views']:4d}  {', '.join(e['shapes'][:3])}"
                  + (" ..." if len(e["shapes"]) > 3 else ""))
        return 0
    if not args.out:
        ap.error("--out is required unless --catalog is given")
    wanted = [s for s in args.shapes.split(",") if s]
    jobs = []
    for sid, dims in runs.MCORE_SHAPES.items():
        if not dims.get("num_moe_experts"):
            jobs.append((sid, "megatron-core", None, dims))
    # MoE layers: their host time has terms of its own (experts hit)
    jobs += [(sid, "transformers", attn, cfg) for sid, attn, cfg in hf_dense_configs()]
    if wanted:
        jobs = [j for j in jobs if j[0] in wanted]
    ver = versions()
    with args.out.open("w") as fh:
        for sid, stack, attn, dims in jobs:
            try:
                if stack == "megatron-core":
                    one, two = count_mcore(dims, 1), count_mcore(dims, 2)
                else:
                    one, two = count_hf(dims, 1, attn), count_hf(dims, 2, attn)
            except Exception as exc:  # a shape this library version cannot build: say so, go on
                print(f"{sid} ({stack} {attn or ''}): {exc!r}", file=sys.stderr)
                continue
            rec = dict(shape_id=sid, stack=stack, attn=attn, ops_per_layer=two["ops"] - one["ops"],
                       views_per_layer=two["views"] - one["views"], ops_one_layer_model=one["ops"],
                       views_one_layer_model=one["views"], versions=ver)
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(f"{sid:28s} {stack:13s} {attn or '':6s} ops {rec['ops_per_layer']:4d} views {rec['views_per_layer']:4d}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
