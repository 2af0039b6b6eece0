"""HBM bytes one transformers decoder layer's memory-bound kernels move per token, forward and backward, counted on
the meta device.

The time model prices a layer's GEMMs and its attention kernel from FLOPs; everything else a layer runs is
memory-bound — norms (transformers' RMSNorm upcasts to fp32 and takes five passes), rotary embedding (slices, a
concatenation, products), the activation and the gate product, residual adds, dtype casts, and all their backwards.
``benchmarks/gpu_layer_kernels.py`` showed those kernels of transformers layers taking 1.8-3.7 times what Korthikanti
et al.'s per-layer activation count (``workbench.timing.elementwise_bytes_per_layer``, two passes) prices, on fit
shapes. This script counts them instead: it builds each transformers corpus config (``benchmarks/corpus/runs.py``)
on the meta device at one and at two layers, runs forward + loss + backward in bf16 under a ``TorchDispatchMode``
and adds up, for every ATen op that is not a view, a GEMM, an embedding lookup or the attention's s x s scores
(inside the flash kernel on a GPU; eager attention's are priced by ``attention_score_bytes``), the bytes of its
tensor inputs and outputs. One layer's bytes are the difference of the two models. Five width variants of each
config (hidden, intermediate, query heads, key/value heads) give, by least squares, bytes per token as

    forward  = a_h·h + a_f·f + a_q·q + a_kv·kv,      backward likewise,

h the hidden size, f the MLP width, q and kv the query and key/value projection widths; the variants lie on that
plane to within 0.3 % (``residual`` in the records). ``--designs`` prints the median coefficients per layer design
(:func:`workbench.layerops.layer_features`) and ``--catalog`` stores them in ``workbench/catalog/efficiency.json``
``transformers.layer_memory_bytes``, where :func:`workbench.layerops.layer_memory_bytes` reads them.
``benchmarks/gpu_layer_kernels.py --memory`` sets these bytes beside the measured kernel time (fit shapes: 0.63-0.69
of the H200's HBM datasheet bandwidth).

    python benchmarks/count_layer_bytes_cpu.py --out benchmarks/results/layer_bytes_cpu.jsonl
    python benchmarks/count_layer_bytes_cpu.py --catalog benchmarks/results/layer_bytes_cpu.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

SEQ = 112
"""Tokens of the counted sequence: no head width equals it, so a 4-D tensor ending in SEQ x SEQ is attention
scores."""
NOT_MEMORY_BOUND = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "embedding", "embedding_dense_backward",
                    "_scaled_dot_product", "_flash_attention", "_efficient_attention", "_cudnn_attention")
"""ATen op names (prefixes) priced elsewhere: GEMMs, the embedding, fused attention."""
NAMES_HEAD_DIM = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text")
"""Model types whose config takes ``head_dim`` (so the query width can vary apart from the hidden size)."""
NO_KERNEL = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "lift_fresh",
             "randint", "arange", "_local_scalar_dense", "sym_size", "sym_stride", "is_same_size")
"""Ops that allocate or describe but move no bytes through a kernel."""


def _tensors(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def census_mode():
    """``(mode, totals)``: a ``TorchDispatchMode`` adding the bytes of memory-bound ops into ``totals[phase]``
    (``mode.phase`` is ``"forward"`` or ``"backward"``)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    totals = {"forward": 0, "backward": 0}

    class Census(TorchDispatchMode):
        phase = "forward"

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if func.is_view or name in NO_KERNEL or name.startswith(NOT_MEMORY_BOUND):
                return out
            tensors = list(_tensors(args)) + list(_tensors(kwargs or {})) + list(_tensors(out))
            if any(t.dim() == 4 and t.shape[-1] == t.shape[-2] == SEQ for t in tensors):
                return out  # attention scores
            totals[self.phase] += sum(t.numel() * t.element_size() for t in tensors)
            return out

    return Census(), totals


def layer_bytes(config: dict, attn: str) -> dict:
    """``{"forward", "backward"}`` bytes per token of one decoder layer of the transformers ``config``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from runs import hf_config_with_layers

    def run(layers):
        c = hf_config_with_layers(config, layers)
        model_type = c.pop("model_type")
        c.pop("architectures", None)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **c), attn_implementation=attn,
                                                     dtype=torch.bfloat16)
        model.train()
        ids = torch.zeros((1, SEQ), dtype=torch.long, device="meta")
        mode, totals = census_mode()
        with mode:
            loss = model(input_ids=ids, labels=ids).loss
            mode.phase = "backward"
            loss.backward()
        return totals

    one, two = run(1), run(2)
    return {k: (two[k] - one[k]) / SEQ for k in ("forward", "backward")}


def widths(config: dict) -> dict:
    """``h``, ``f``, ``q`` and ``kv`` of a transformers config."""
    h = config.get("hidden_size") or config["n_embd"]
    heads = config.get("num_attention_heads") or config["n_head"]
    head_dim = config.get("head_dim") or h // heads
    kv = config.get("num_key_value_heads") or heads
    f = config.get("intermediate_size") or config.get("n_inner") or 4 * h
    return dict(h=h, f=f, q=heads * head_dim, kv=kv * head_dim)


def variants(config: dict) -> list:
    """The config and four width variants (MLP width, query heads, key/value heads, hidden size), the head width
    kept where the model type takes it (:data:`NAMES_HEAD_DIM`; elsewhere q and kv follow h and only their sum of
    coefficients is determined, which is all such a design needs)."""
    c = dict(config)
    hk = "hidden_size" if "hidden_size" in c else "n_embd"
    heads_k = "num_attention_heads" if "num_attention_heads" in c else "n_head"
    if "head_dim" not in c and c["model_type"] in NAMES_HEAD_DIM:  # the same model, its head width named
        c["head_dim"] = c[hk] // c[heads_k]
    out = [c]
    if "intermediate_size" in c:
        out.append(dict(c, intermediate_size=2 * c["intermediate_size"]))
    else:
        out.append(dict(c, n_inner=8 * c[hk]))
    if "head_dim" in c:
        out.append(dict(c, **{heads_k: 2 * c[heads_k]},
                        **({"num_key_value_heads": 2 * c["num_key_value_heads"]} if "num_key_value_heads" in c else {})))
    if c.get("num_key_value_heads") and c["num_key_value_heads"] < c[heads_k]:
        out.append(dict(c, num_key_value_heads=c[heads_k]))  # every head its own key/value
    h2 = dict(c, **{hk: 2 * c[hk]})
    if "head_dim" not in c:
        h2[heads_k] = 2 * c[heads_k]
        if "num_key_value_heads" in c:
            h2["num_key_value_heads"] = 2 * c["num_key_value_heads"]
    out.append(h2)
    return out


def coefficients(config: dict, attn: str) -> dict:
    """Least-squares ``{phase: {"h", "f", "q", "kv"}}`` bytes per token per unit width over :func:`variants`, with
    the largest relative residual."""
    import numpy as np

    rows, ys = [], {"forward": [], "backward": []}
    for v in variants(config):
        w = widths(v)
        rows.append([w["h"], w["f"], w["q"], w["kv"]])
        b = layer_bytes(v, attn)
        for k in ys:
            ys[k].append(b[k])
    a = np.array(rows, dtype=float)
    out, worst = {}, 0.0
    for k, y in ys.items():
        coef = np.linalg.lstsq(a, np.array(y), rcond=None)[0]
        out[k] = dict(zip(("h", "f", "q", "kv"), (round(float(c), 4) for c in coef)))
        fit = a @ coef
        worst = max(worst, float(np.max(np.abs(fit - y) / np.maximum(y, 1))))
    out["residual"] = worst
    return out


def bytes_per_token(rec: dict, config: dict) -> tuple:
    """``(forward, backward)`` bytes per token of one layer of ``config`` from a census record's coefficients."""
    w = widths(config)
    return tuple(sum(rec[phase][k] * w[k] for k in ("h", "f", "q", "kv")) for phase in ("forward", "backward"))


def designs(path: Path) -> list:
    """The median coefficients per layer design of the records in ``path``."""
    from count_layer_ops_cpu import shape_model

    from workbench import layerops

    groups: dict = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        feats = layerops.layer_features(shape_model(rec["shape_id"], rec["attn"]))
        groups.setdefault(tuple(feats[f] for f in layerops.FEATURES), []).append(rec)
    entries = []
    for key, recs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        entry = dict(zip(layerops.FEATURES, key))
        for phase in ("forward", "backward"):
            entry[phase] = {w: round(statistics.median(r[phase][w] for r in recs), 3) for w in ("h", "f", "q", "kv")}
        entry["shapes"] = sorted({r["shape_id"] for r in recs})
        entries.append(entry)
    return entries


def write_catalog(path: Path) -> list:
    """:func:`designs` of the records in ``path`` into the catalog's ``transformers.layer_memory_bytes`` (with the
    library versions they were counted with); returns the entries."""
    entries = designs(path)
    cat = ROOT / "workbench" / "catalog" / "efficiency.json"
    cal = json.loads(cat.read_text())
    cal["transformers"]["layer_memory_bytes"] = entries
    cal["transformers"]["layer_memory_bytes_versions"] = json.loads(path.read_text().splitlines()[0])["versions"]
    cat.write_text(json.dumps(cal, indent=2, ensure_ascii=False) + "\n")
    return entries


def main(argv=None) -> int:
    from count_layer_ops_cpu import hf_dense_configs, versions

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--designs", type=Path, help="print the median coefficients per layer design of these records")
    ap.add_argument("--catalog", type=Path, help="store them in the catalog (transformers.layer_memory_bytes)")
    ap.add_argument("--shapes", default="")
    args = ap.parse_args(argv)
    if args.designs or args.catalog:
        for e in (write_catalog(args.catalog) if args.catalog else designs(args.designs)):
            print(f"{e['activation']:7s} {e['normalization']:9s} {e['attention']:8s} qk_norm {e['qk_norm']!s:5s} "
                  f"fused {e['fused_projections']!s:5s} fwd {e['forward']} bwd {e['backward']}")
        return 0
    if not args.out:
        ap.error("--out, --designs or --catalog")
    wanted = [s for s in args.shapes.split(",") if s]
    ver = versions()
    with args.out.open("w") as fh:
        for sid, attn, cfg in hf_dense_configs():
            if wanted and sid not in wanted:
                continue
            try:
                rec = dict(shape_id=sid, attn=attn, **coefficients(cfg, attn), versions=ver)
            except Exception as exc:  # a config this library version cannot build on meta: say so, go on
                print(f"{sid} ({attn}): {exc!r}", file=sys.stderr)
                continue
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(f"{sid:26s} {attn:6s} fwd {rec['forward']} bwd {rec['backward']} residual {rec['residual']:.1e}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
