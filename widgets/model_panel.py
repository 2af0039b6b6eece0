"""ModelPanel: a catalog preset plus every ``ModelSpec`` dimension, and the parameter count the core computes."""
from __future__ import annotations

import ipywidgets as ipw

from widgets.common import Panel, checkbox, dropdown, float_text, int_text
from widgets.state import LoadPreset, SetModel, resolved
from workbench import catalog
from workbench.specs import Activation, AttentionImpl, ExpertsImpl, Implementation, Normalization, Positions

_INTS = (
    ("num_layers", "layers", 1),
    ("hidden_size", "hidden size", 1),
    ("num_attention_heads", "attention heads", 1),
    ("num_query_groups", "KV heads (GQA)", 1),
    ("head_dim", "head dim", 1),
    ("ffn_hidden_size", "FFN size", 1),
    ("vocab_size", "vocabulary", 1),
    ("seq_length", "sequence length", 1),
)
_CHOICES = (
    ("activation", "activation", Activation),
    ("normalization", "norm", Normalization),
    ("position_embedding", "positions", Positions),
    ("attention", "attention", AttentionImpl),
    ("implementation", "model code", Implementation),
)
_BOOLS = (
    ("add_bias_linear", "linear biases"),
    ("tied_embeddings", "tied embeddings"),
    ("qkv_bias", "QKV biases"),
    ("qk_norm", "Q/K norms"),
    ("sandwich_norm", "sandwich norms"),
    ("post_norm", "norms after attn/MLP"),
    ("qk_norm_projection", "Q/K norms per projection"),
)
_FLOATS = (
    ("hidden_dropout", "hidden dropout"),
    ("attention_dropout", "attention dropout"),
)
_MOE = (
    ("num_experts", "experts (0 = dense)", 0),
    ("moe_top_k", "MoE top-k", 1),
    ("moe_ffn_hidden_size", "expert FFN size", 1),
)


class ModelPanel(Panel):
    """Model dimensions. Changing a field sends ``SetModel``; choosing a preset sends ``LoadPreset``."""

    title = "Model"
    parts = ("model",)

    def __init__(self, dispatch=None) -> None:
        super().__init__(dispatch)
        self.preset = ipw.Dropdown(description="preset", options=["custom", *catalog.model_names()],
                                   layout=ipw.Layout(width="330px"), style={"description_width": "175px"})
        self.preset.observe(self._on_preset, names="value")
        self.controls = {}
        for name, label, minimum in _INTS + _MOE:
            self.controls[name] = int_text(label, minimum=minimum)
        for name, label, enum_cls in _CHOICES:
            self.controls[name] = dropdown(label, [m.value for m in enum_cls])
        for name, label in _BOOLS:
            self.controls[name] = checkbox(label)
        for name, label in _FLOATS:
            self.controls[name] = float_text(label)
            self.controls[name].max = 1.0
            self.controls[name].step = 0.05
        for name, w in self.controls.items():
            w.observe(lambda change, name=name: self._on_field(name, change["new"]), names="value")
        self.parameters = ipw.HTML()
        self.parameters.add_class("wb-model-params")
        # transformers' experts_implementation: only for a transformers MoE model (grouped_mm is its default)
        self.controls["experts_implementation"] = dropdown(
            "experts (HF)", [m.value for m in ExpertsImpl],
            tooltip="transformers' experts_implementation: grouped_mm (default) or eager (a loop over the experts hit)")
        self.controls["experts_implementation"].observe(
            lambda change: self._on_field("experts_implementation", change["new"]), names="value")
        moe = ipw.VBox([*[self.controls[n] for n, _, _ in _MOE], self.controls["experts_implementation"]])
        self.widget = ipw.VBox([
            self.preset,
            *[self.controls[n] for n, _, _ in _INTS],
            *[self.controls[n] for n, _, _ in _CHOICES],
            ipw.HBox([self.controls[n] for n, _ in _BOOLS], layout=ipw.Layout(flex_flow="row wrap")),
            *[self.controls[n] for n, _ in _FLOATS],
            ipw.Accordion(children=[moe], titles=("mixture of experts",), selected_index=None),
            self.parameters,
            self.error,
        ])

    def _on_preset(self, change) -> None:
        if change["new"] != "custom":
            self.send(LoadPreset(name=change["new"]))

    def _on_field(self, name: str, value) -> None:
        if name == "num_experts":
            value = value or None  # 0 means a dense model
        if name in ("moe_top_k", "moe_ffn_hidden_size") and resolved_experts(self) is None:
            return  # MoE fields only matter with experts
        if name == "experts_implementation":
            if not hf_moe(self):
                return  # transformers' setting: only a transformers MoE model has one
            value = None if value == ExpertsImpl.GROUPED_MM else value  # its default stays automatic
        self.send(SetModel(changes={name: value}))

    def show(self, state) -> None:
        with self.syncing():
            self.set_value(self.preset, state.preset if state.preset in self.preset.options else "custom")
            for name, w in self.controls.items():
                value = resolved(state, "model", name)
                if name == "num_experts":
                    value = value or 0
                elif name in ("moe_top_k", "moe_ffn_hidden_size") and value is None:
                    value = state.model.ffn_hidden_size if name == "moe_ffn_hidden_size" else state.model.moe_top_k
                elif name == "experts_implementation" and value is None:
                    value = ExpertsImpl.GROUPED_MM
                value = value.value if hasattr(value, "value") else value
                self.set_value(w, value)
            is_moe = bool(self.controls["num_experts"].value)
            for name in ("moe_top_k", "moe_ffn_hidden_size"):
                self.controls[name].disabled = not is_moe
            self.controls["experts_implementation"].disabled = not hf_moe(self)
        counts = state.model.parameter_counts()
        text = (f"<b>{counts.total / 1e9:.2f} B</b> parameters"
                + (f" ({counts.active / 1e9:.2f} B active)" if state.model.is_moe else "")
                + f" · {state.preset}")
        if self.parameters.value != text:
            self.parameters.value = text
        self.show_error(state)


def resolved_experts(panel: ModelPanel):
    return panel.controls["num_experts"].value or None


def hf_moe(panel: ModelPanel) -> bool:
    """Whether the panel shows a transformers MoE model (the one kind with an ``experts_implementation``)."""
    return resolved_experts(panel) is not None and panel.controls["implementation"].value == "transformers"
