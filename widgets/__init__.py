"""Jupyter widgets for the workbench: one panel or view per module, composed by :class:`widgets.app.Workbench`.

The panels hold no formulas: they turn user input into actions on :mod:`widgets.state` and draw what
``workbench.estimate`` computes.
"""
from __future__ import annotations

__all__ = ["Workbench"]


def __getattr__(name):
    if name == "Workbench":
        from widgets.app import Workbench

        return Workbench
    raise AttributeError(name)
