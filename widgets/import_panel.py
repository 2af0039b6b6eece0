"""ImportPanel: paste a ``ds_config.json`` or a Megatron / Megatron-DeepSpeed command line (or launch script) and
load what it says into the other panels. The text is parsed by :mod:`workbench.configs`; what it leaves out (the
model for a ds_config, the GPU) comes from the current state.

Only pasted text is read: the panel never opens a path, so a served dashboard cannot be made to read server files.
"""
from __future__ import annotations

import html

import ipywidgets as ipw

from widgets.common import Panel
from widgets.state import LoadSpecs
from workbench.configs.importer import import_text


def parse_pasted(text: str):
    """``Imported`` from pasted text: JSON (starts with ``{``) is a ds_config, anything else a command line. The text
    is never taken for a file name."""
    text = (text or "").strip()
    if not text:
        raise ValueError("nothing to import: paste a ds_config.json or a Megatron command line")
    return import_text(text)


def specs_from_import(imported, state):
    """``(model, cluster, plan, options)`` from an import, filling gaps from the current state."""
    cluster = state.cluster
    per_node, nodes = imported.options.get("gpus_per_node"), imported.options.get("num_nodes")
    if per_node or nodes:
        cluster = cluster.replace(gpus_per_node=int(per_node or cluster.gpus_per_node),
                                  num_nodes=int(nodes or cluster.num_nodes))
    model, plan = imported.to_specs(model=state.model, cluster=cluster)
    if plan.world_size != cluster.world_size:
        # the source fixes the world size (e.g. through its batch arithmetic): keep the GPUs per node
        if plan.world_size % cluster.gpus_per_node == 0:
            cluster = cluster.replace(num_nodes=plan.world_size // cluster.gpus_per_node)
        else:
            cluster = cluster.replace(gpus_per_node=plan.world_size, num_nodes=1)
    return model, cluster, plan, imported.deepspeed_options()


def _message(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, ValueError):
        return first or "invalid input"
    if isinstance(exc, RecursionError):
        return "the pasted text is nested too deeply to read"
    return f"could not import it ({exc.__class__.__name__}{': ' + first if first else ''})"


class ImportPanel(Panel):
    """A text box and a button; warnings and lint findings of the import are listed under it."""

    title = "Import"
    parts = ("import",)

    def __init__(self, dispatch=None) -> None:
        super().__init__(dispatch)
        self.text = ipw.Textarea(placeholder="paste ds_config.json or a pretrain_gpt.py command line",
                                 layout=ipw.Layout(width="340px", height="260px"))
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

        try:
            imported = parse_pasted(self.text.value)
            model, cluster, plan, options = specs_from_import(imported, self._state)
            notes = [f"imported a <b>{html.escape(imported.kind)}</b> source: {html.escape(model.name)}, "
                     f"{plan.world_size} GPUs, {html.escape(str(plan.engine))} TP{plan.tensor_parallel} "
                     f"PP{plan.pipeline_parallel} DP{plan.data_parallel} ZeRO-{int(plan.zero_stage)}"]
            notes += [f"⚠ {html.escape(str(w))}" for w in imported.warnings]
            notes += [f"lint {html.escape(str(f))}" for f in imported.lint]
            self.send(LoadSpecs(model=model, cluster=cluster, plan=plan, options=options))
        except Exception as exc:  # noqa: BLE001 - a click handler shows every failure in red, never raises
            self.error.value = error_html(_message(exc))
            self.report.value = ""
            return False
        self.error.value = ""
        self.report.value = "<br>".join(notes)
        return True

    def show(self, state) -> None:
        self._state = state
