"""ImportPanel: paste a ``ds_config.json``, a Hugging Face model's ``config.json`` or a Megatron /
Megatron-DeepSpeed command line (or launch script) and load what it says into the other panels. The text is parsed by :mod:`workbench.configs`; what it leaves out (the
model for a ds_config, the GPU) comes from the current state.

Only pasted text is read: the panel never opens a path, so a served dashboard cannot be made to read server files.
"""
from __future__ import annotations

import html
import json

import ipywidgets as ipw

from widgets.common import Panel, error_message
from widgets.state import LoadSpecs, build_cluster, build_model, check_dashboard_size
from workbench.configs.importer import import_ds_config, import_text
from workbench.hf import HFModel, import_hf, is_hf_config


def parse_pasted(text: str):
    """From pasted text: a Hugging Face config.json (JSON with a ``model_type``) gives an
    :class:`~workbench.hf.HFModel`; other JSON is a ds_config; anything else a command line (``Imported``)."""
    text = (text or "").strip()
    if not text:
        raise ValueError("nothing to import: paste a ds_config.json, a model's config.json or a Megatron "
                         "command line")
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if is_hf_config(data):
            return import_hf(data, name=f"hf:{data['model_type']}")
        return import_ds_config(text)
    return import_text(text)  # never taken for a file name


def shown_specs(state):
    """``(model, cluster)`` as the Model and Hardware panels show them: built from the typed inputs where those are
    valid on their own (they stay unapplied while another panel's value is refused), else the last valid specs."""
    try:
        model = build_model(state.model_inputs)
    except (ValueError, TypeError, KeyError):
        model = state.model
    try:
        cluster = build_cluster(state.cluster_inputs)
        check_dashboard_size(cluster)
    except (ValueError, TypeError, KeyError):
        cluster = state.cluster
    return model, cluster


def specs_from_import(imported, state):
    """``(model, cluster, plan, options)`` from an import, filling gaps from what the panels show."""
    model, cluster = shown_specs(state)
    per_node, nodes = imported.options.get("gpus_per_node"), imported.options.get("num_nodes")
    if per_node or nodes:
        cluster = cluster.replace(gpus_per_node=int(per_node or cluster.gpus_per_node),
                                  num_nodes=int(nodes or cluster.num_nodes))
    needed = 1
    for name in ("tensor_parallel", "pipeline_parallel", "context_parallel"):
        needed *= int(imported.plan_fields.get(name) or 1)
    if cluster.world_size % needed:
        raise ValueError(f"the pasted {imported.kind} source needs TP × PP × CP = {needed} GPUs for one model "
                         f"replica and the Hardware panel has {cluster.world_size} ({cluster.num_nodes} node(s) × "
                         f"{cluster.gpus_per_node}), which {needed} does not divide: set GPUs per node and nodes in "
                         f"the Hardware panel first, then load it again")
    model, plan = imported.to_specs(model=model, cluster=cluster)
    if plan.world_size != cluster.world_size:
        # the source fixes the world size (e.g. through its batch arithmetic): keep the GPUs per node
        if plan.world_size % cluster.gpus_per_node == 0:
            cluster = cluster.replace(num_nodes=plan.world_size // cluster.gpus_per_node)
        else:
            cluster = cluster.replace(gpus_per_node=plan.world_size, num_nodes=1)
    return model, cluster, plan, imported.deepspeed_options()


def _message(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "the pasted text is nested too deeply to read"
    return error_message(exc)


class ImportPanel(Panel):
    """A text box and a button; warnings and lint findings of the import are listed under it."""

    title = "Import"
    parts = ("import",)

    def __init__(self, dispatch=None) -> None:
        super().__init__(dispatch)
        self.text = ipw.Textarea(placeholder="paste ds_config.json, a model's config.json or a pretrain_gpt.py command line",
                                 layout=ipw.Layout(width="calc(100% - 6px)", height="260px"))  # inside the panel, margins included
        self.text.add_class("wb-import-text")
        self.button = ipw.Button(description="Load into panels", icon="upload", button_style="primary")
        self.button.on_click(lambda _: self.load())
        self.report = ipw.HTML()
        self.report.add_class("wb-import-report")
        self.widget = ipw.VBox([self.text, self.button, self.error, self.report])
        self._state = None

    def load(self) -> bool:
        """Parse the pasted text and load it; ``False`` (with the message shown) when it cannot be imported."""
        from widgets.common import error_html
        from workbench.configs.lint import finding_lines
        from workbench.specs import validate

        try:
            imported = parse_pasted(self.text.value)
            if isinstance(imported, HFModel):
                return self._load_hf(imported)
            model, cluster, plan, options = specs_from_import(imported, self._state)
            # refused here, in this panel, before anything is replaced: the other panels keep the user's inputs
            validate(model, cluster, plan)
            notes = [f"imported a <b>{html.escape(imported.kind)}</b> source: {html.escape(model.name)}, "
                     f"{plan.world_size} GPUs, {html.escape(str(plan.engine))} TP{plan.tensor_parallel} "
                     f"PP{plan.pipeline_parallel} DP{plan.data_parallel} ZeRO-{int(plan.zero_stage)}"]
            notes += [f"⚠ {html.escape(str(w))}" for w in imported.warnings]
            notes += [f"lint {html.escape(line)}" for line in finding_lines(imported.lint)]
            # a source without model fields (a ds_config) keeps the model, and the config.json it was imported from
            hf_model = None if imported.model_fields else self._state.hf_model
            self.send(LoadSpecs(model=model, cluster=cluster, plan=plan, options=options, hf_model=hf_model))
        except Exception as exc:  # noqa: BLE001 - a click handler shows every failure in red, never raises
            self.error.value = error_html(_message(exc))
            self.report.value = ""
            return False
        self.error.value = ""
        self.report.value = "<br>".join(notes)
        return True

    def show(self, state) -> None:
        self._state = state

    def _load_hf(self, imported: HFModel) -> bool:
        """A Hugging Face model replaces the model; the hardware stays, and so does the plan when it is a DeepSpeed
        data-parallel plan (otherwise it becomes ZeRO-3 over every GPU: an HF model trains under DeepSpeed)."""
        from widgets.common import error_html
        from workbench.specs import NO_PIPELINE, Engine, hf_checkpoint_every, validate

        state = self._state
        _, cluster = shown_specs(state)  # the GPUs typed in the Hardware panel, also while the old plan refuses them
        world = cluster.world_size
        plan, changed = state.plan, ""
        gbs = plan.global_batch_size
        mbs = plan.micro_batch_size if gbs % (plan.micro_batch_size * world) == 0 else 1
        batch = dict(world_size=world, micro_batch_size=mbs,
                     global_batch_size=gbs if gbs % (mbs * world) == 0 else None)
        if plan.engine is not Engine.DEEPSPEED or plan.pipeline_parallel > 1:
            plan = plan.replace(engine="deepspeed", tensor_parallel=1, **NO_PIPELINE, context_parallel=1,
                                sequence_parallel=False, distributed_optimizer=False, zero_stage=3,
                                recompute_layers=None, **batch)
            changed = (f"plan changed to DeepSpeed ZeRO-3 over {plan.world_size} GPUs (an HF model trains under "
                       f"DeepSpeed ZeRO data parallel)")
        elif plan.world_size != world:
            plan = plan.replace(**batch)
        dtype = imported.config.get("dtype") or imported.config.get("torch_dtype")
        if str(plan.precision) == "fp16" and dtype == "bfloat16" and cluster.gpu.peak_tflops.get("bf16"):
            # a model stored in bfloat16 is trained in bf16 where the GPU has it (and the replay traces bf16)
            plan = plan.replace(precision="bf16")
            changed = "; ".join(filter(None, (changed, "precision set to bf16 (the config's dtype is bfloat16)")))
        if str(plan.recompute) == "selective":
            # transformers checkpoints whole decoder layers (activation_checkpointing_enable)
            plan = plan.replace(recompute="full", recompute_layers=None)
            changed = "; ".join(filter(None, (changed, "recompute set to full (an HF model checkpoints whole decoder "
                                                      "layers; no selective recompute)")))
        elif plan.recompute_layers is not None:
            try:  # a count transformers' every_n_layers reaches for this model's layers stays
                hf_checkpoint_every(imported.spec.num_layers, plan.recompute_layers, name=imported.spec.name)
            except ValueError:
                changed = "; ".join(filter(None, (changed, f"recompute layers set to all {imported.spec.num_layers} "
                                                          f"(transformers checkpoints every k-th decoder layer: "
                                                          f"{plan.recompute_layers} is not a count it reaches)")))
                plan = plan.replace(recompute_layers=None)
        try:
            validate(imported.spec, cluster, plan)
        except ValueError as exc:
            self.error.value = error_html(str(exc))
            self.report.value = ""
            return False
        self.error.value = ""
        spec = imported.spec
        notes = [f"imported a <b>Hugging Face</b> {html.escape(imported.model_type)} model "
                 f"({html.escape(imported.architecture)}): {spec.num_parameters / 1e9:.2f} B parameters, "
                 f"attn_implementation {html.escape(imported.effective_attn_implementation)} → "
                 f"{html.escape(str(spec.attention))} attention, seq {spec.seq_length}"
                 + (f", experts_implementation {html.escape(str(spec.experts_implementation))}"
                    if spec.experts_implementation is not None else "")]
        notes += [html.escape(changed)] if changed else []
        notes += [f"note: {html.escape(n)}" for n in imported.notes]
        self.report.value = "<br>".join(notes)
        self.send(LoadSpecs(model=spec, cluster=cluster, plan=plan, options=None, hf_model=imported))
        return True
