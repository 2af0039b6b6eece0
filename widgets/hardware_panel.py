"""HardwarePanel: the GPU from the catalog, GPUs per node, nodes, bandwidths, host memory, NVMe and CPU cores."""
from __future__ import annotations

import html

import ipywidgets as ipw

from widgets.common import Panel, dropdown, float_text, int_text
from widgets.state import SetCluster, resolved
from workbench import catalog

_FIELDS = (
    ("gpus_per_node", "GPUs per node", "int"),
    ("num_nodes", "nodes", "int"),
    ("intra_node_gb_per_s", "intra-node GB/s per GPU", "float"),
    ("inter_node_gb_per_s", "inter-node GB/s per GPU", "float"),
    ("host_memory_gib_per_node", "host memory GiB / node", "float"),
    ("nvme_gib_per_node", "NVMe GiB / node", "float"),
    ("nvme_read_gb_per_s", "NVMe read GB/s / node", "float"),
    ("nvme_write_gb_per_s", "NVMe write GB/s / node", "float"),
    ("host_cpu_cores_per_node", "CPU cores / node", "int"),
    ("cpu_adam_threads", "CPU Adam threads", "threads"),
)


class HardwarePanel(Panel):
    """Cluster inputs. Choosing a GPU resets both bandwidths to that GPU's catalog values."""

    title = "Hardware"
    parts = ("cluster",)

    def __init__(self, dispatch=None) -> None:
        super().__init__(dispatch)
        self.controls = {"gpu": dropdown("GPU", catalog.gpu_names())}
        for name, label, kind in _FIELDS:
            if kind == "threads":  # 0 means the launcher's default
                self.controls[name] = int_text(label, "threads of each rank's CPU Adam with optimizer offload "
                                                      "(OMP_NUM_THREADS); 0 = CPU cores / GPUs per node, what "
                                                      "workbench run sets; torchrun alone sets 1", minimum=0)
            else:
                self.controls[name] = int_text(label, minimum=1) if kind == "int" else float_text(label)
        for name, w in self.controls.items():
            w.observe(lambda change, name=name: self.send(SetCluster(changes={name: change["new"]})),
                      names="value")
        self.info = ipw.HTML()
        self.info.add_class("wb-gpu-info")
        self.widget = ipw.VBox([*self.controls.values(), self.info, self.error])

    def show(self, state) -> None:
        with self.syncing():
            for name, w in self.controls.items():
                self.set_value(w, resolved(state, "cluster", name))
        gpu = state.cluster.gpu
        peaks = ", ".join(f"{k} {v:g}" for k, v in gpu.peak_tflops.items() if v)
        text = (f"{html.escape(gpu.name)}: {gpu.memory_gib:g} GiB, HBM {gpu.hbm_gb_per_s:g} GB/s, "
                f"dense TFLOP/s {html.escape(peaks)} · <b>{state.cluster.world_size}</b> GPUs"
                f'<br><span style="font-size:smaller;color:#666">{html.escape(gpu.source)}</span>')
        if self.info.value != text:
            self.info.value = text
        self.show_error(state)
