"""The workbench core: specs, catalogs, memory and time models, layout, planner, advisor, configs, runs.

Pure Python + numpy; it never imports ipywidgets or plotly (``widgets/`` wraps it).
"""
from workbench.specs import (  # noqa: F401
    Activation, AttentionImpl, ClusterSpec, CPCommType, Engine, Fp8Recipe, GPUSpec, ModelSpec, Normalization, Offload,
    ParallelPlan,
    Positions, Precision, Recompute, ZeroStage, validate,
)

__version__ = "0.1.0"
