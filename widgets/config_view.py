"""ConfigView: the files a user runs for the current plan — DeepSpeed ``ds_config.json``, the Megatron-LM command,
the Megatron-DeepSpeed hybrid command, and a launch script (DeepSpeed launcher, torchrun or SLURM) — each with a
download link. Exports the engine does not use say why (the core's message), inline.

Download links are data URLs built in the browser page: nothing is written on the server. Writing the files into a
server folder is offered only when the app was created with ``allow_write=True``.
"""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import ipywidgets as ipw

from widgets.common import View, error_html
from workbench.configs import (build_ds_config, deepspeed_launch_script, hostfile, hybrid_args, hybrid_command,
                               hybrid_ds_config, megatron_args, megatron_command, slurm_script, torchrun_script)
from workbench.specs import Engine

SECTIONS = ("ds_config.json", "Megatron command", "hybrid command", "launch script")
MAIN_SECTION = {Engine.DEEPSPEED: "ds_config.json", Engine.MEGATRON: "Megatron command",
                Engine.MEGATRON_DEEPSPEED: "hybrid command"}
"""The section shown first for each engine (switched to when the plan's engine changes)."""
LAUNCHERS = ("DeepSpeed launcher", "torchrun", "SLURM")
USER_SCRIPT = "train.py"
"""The user's DeepSpeed training script that launch scripts for engine ``deepspeed`` run."""

CODE_FONT = "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace"
"""Scripts and configs in a fixed-width font (the page theme would otherwise set its text font on <pre>)."""


def training_command(model, cluster, plan, options=None) -> list:
    """The program and arguments every rank runs, for the plan's engine."""
    if plan.engine is Engine.MEGATRON:
        return ["$MEGATRON_LM/pretrain_gpt.py", *megatron_args(model, cluster, plan, options=options)]
    if plan.engine is Engine.MEGATRON_DEEPSPEED:
        return ["$MEGATRON_DEEPSPEED/pretrain_gpt.py", *hybrid_args(model, cluster, plan, options=options)]
    return [USER_SCRIPT, "--deepspeed", "--deepspeed_config", "ds_config.json"]


def export_files(section: str, model, cluster, plan, options=None, launcher: str = "DeepSpeed launcher") -> dict:
    """``{file name: text}`` for one section; raises the core's ``ValueError`` when the plan's engine has none."""
    if section == "ds_config.json":
        build = hybrid_ds_config if plan.engine is Engine.MEGATRON_DEEPSPEED else build_ds_config
        return {"ds_config.json": json.dumps(build(model, cluster, plan, options=options), indent=2) + "\n"}
    if section == "Megatron command":
        if plan.engine is not Engine.MEGATRON:
            raise ValueError(f"engine='{plan.engine}': the Megatron-LM command is for engine 'megatron' "
                             f"(see '{'hybrid command' if plan.engine is Engine.MEGATRON_DEEPSPEED else 'launch script'}')")
        return {"pretrain_megatron.sh": megatron_command(model, cluster, plan, options=options)}
    if section == "hybrid command":
        if plan.engine is not Engine.MEGATRON_DEEPSPEED:
            raise ValueError(f"engine='{plan.engine}': the hybrid command is for engine 'megatron-deepspeed'")
        return {"pretrain_hybrid.sh": hybrid_command(model, cluster, plan, options=options),
                "ds_config.json": json.dumps(hybrid_ds_config(model, cluster, plan, options=options), indent=2)
                + "\n"}
    if section == "launch script":
        command = training_command(model, cluster, plan, options)
        if launcher == "DeepSpeed launcher":
            files = {"launch_deepspeed.sh": deepspeed_launch_script(cluster, command)}
            if cluster.num_nodes > 1:
                files["hostfile"] = hostfile(cluster)
            return files
        if launcher == "torchrun":
            return {"launch_torchrun.sh": torchrun_script(cluster, command)}
        return {"launch_slurm.sbatch": slurm_script(cluster, command)}
    raise KeyError(section)


def download_link(name: str, text: str) -> str:
    """An ``<a download>`` whose data URL carries the file: the browser saves it, the server writes nothing."""
    data = base64.b64encode(text.encode()).decode()
    mime = "application/json" if name.endswith(".json") else "text/plain"
    return (f'<a class="wb-download" download="{html.escape(name)}" href="data:{mime};base64,{data}" '
            f'style="display:inline-block;margin:2px 8px 2px 0;padding:3px 10px;border:1px solid #888;'
            f'border-radius:3px;text-decoration:none">⬇ {html.escape(name)}</a>')


def config_note(state) -> str:
    """What the files shown are for, in amber, when it is not simply the plan the inputs say: the last valid plan
    while an input is refused, or a plan the estimate says does not fit (the files are valid; the run would fail)."""
    if getattr(state, "valid", True) is False:
        return ('<span style="color:#8a5300">These files are for the last valid plan: an input is refused '
                f'({html.escape(str(getattr(state, "error", "") or ""))[:200]}).</span>')
    est = getattr(state, "estimate", None)
    mem = getattr(est, "memory", None)
    if mem is not None and not mem.fits:
        where = "the GPU" if not mem.fits_gpu else "host memory" if not mem.fits_host else "the NVMe"
        return ('<span style="color:#8a5300">The estimate says this plan does not fit '
                f'{where} (Memory tab): the files are valid, the run would fail.</span>')
    return ""


class ConfigView(View):
    """Generated configs for the current plan; only the selected section is computed."""

    title = "Configs"

    def __init__(self, app=None) -> None:
        self.app = app
        self.section = ipw.ToggleButtons(options=SECTIONS, style={"button_width": "140px"})
        self.launcher = ipw.Dropdown(options=LAUNCHERS, description="launcher", layout=ipw.Layout(width="300px"))
        self.section.observe(lambda _: self._redraw(), names="value")
        self.launcher.observe(lambda _: self._redraw(), names="value")
        self.downloads = ipw.HTML()
        self.downloads.add_class("wb-config-downloads")
        self.text = ipw.HTML()
        self.text.add_class("wb-config-text")
        self.error = ipw.HTML()
        self.note = ipw.HTML()
        self.note.add_class("wb-config-note")
        children = [self.section, self.launcher, self.error, self.note, self.downloads, self.text]
        self.write_folder = self.write_button = self.write_status = None
        if app is not None and app.allow_write:
            self.write_folder = ipw.Text(value="workbench-export", description="folder",
                                         layout=ipw.Layout(width="400px"))
            self.write_button = ipw.Button(description="Write files", icon="save")
            self.write_status = ipw.HTML()
            self.write_button.on_click(lambda _: self._on_write())
            children.insert(3, ipw.HBox([self.write_folder, self.write_button, self.write_status]))
        self.widget = ipw.VBox(children)
        self._state = None
        self.files: dict = {}

    def show(self, state) -> None:
        self.note.value = config_note(state)
        if self._state is not None and state.estimate is self._state.estimate and state.options is self._state.options:
            return
        engine_changed = self._state is None or self._state.plan.engine is not state.plan.engine
        self._state = state
        if engine_changed and self.section.value != MAIN_SECTION[state.plan.engine]:
            self.section.value = MAIN_SECTION[state.plan.engine]  # redraws through the observer
        else:
            self._redraw()

    def _redraw(self) -> None:
        state = self._state
        if state is None:
            return
        self.launcher.layout.display = "" if self.section.value == "launch script" else "none"
        try:
            self.files = export_files(self.section.value, state.model, state.cluster, state.plan, state.options,
                                      self.launcher.value)
            message = ""
        except ValueError as exc:
            self.files, message = {}, str(exc).strip().splitlines()[0]
        self.error.value = error_html(message, max_width="900px")
        self.downloads.value = "".join(download_link(n, t) for n, t in self.files.items())
        self.text.value = "".join(
            f'<div style="font-weight:bold;margin-top:6px">{html.escape(n)}</div>'
            f'<pre style="max-height:420px;overflow:auto;background:#f6f8fa;padding:8px;font-size:12px;'
            f'line-height:1.3;white-space:pre;font-family:{CODE_FONT}">{html.escape(t)}</pre>'
            for n, t in self.files.items())

    def write_files(self, folder: str) -> list:
        """Write the shown files into ``folder``, a folder inside the app's export directory
        (:func:`workbench.paths.exports_dir`, or the app's ``export_dir``), only when the app allows writing. A path
        leading out of it (absolute, ``..``) is refused."""
        if self.app is None:
            raise PermissionError("write is disabled: this view has no app that allows it")
        self.app.require("write")
        from workbench.paths import confined, exports_dir

        base = Path(getattr(self.app, "export_dir", None) or exports_dir())
        out = confined(base, folder)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in self.files.items():
            path = out / name
            path.write_text(text)
            if name.endswith(".sh") or name.endswith(".sbatch"):
                path.chmod(0o755)
            written.append(str(path))
        if self.write_status is not None:
            self.write_status.value = f"wrote {len(written)} file(s) to {html.escape(str(out))}"
        return written

    def _on_write(self) -> None:
        """The Write button: every failure (a folder outside the export directory, a full disk) shows in red."""
        try:
            self.write_files(self.write_folder.value)
        except Exception as exc:  # noqa: BLE001 - a click handler shows the message, never raises
            text = str(exc).strip()
            self.write_status.value = error_html(text.splitlines()[0] if text else exc.__class__.__name__,
                                                 max_width="600px")
