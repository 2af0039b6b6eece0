"""Small helpers every panel uses: labelled controls, the inline error box, and the base panel class."""
from __future__ import annotations


import html
from contextlib import contextmanager
from typing import Callable, Optional

import ipywidgets as ipw

GIB = 2**30
LABEL_WIDTH = "175px"


def gib(num_bytes) -> float:
    return float(num_bytes) / GIB


def control_layout(width: str = "330px") -> ipw.Layout:
    return ipw.Layout(width=width)


def style() -> dict:
    return {"description_width": LABEL_WIDTH}


BOX_MAX = 2**40
"""The largest value a number box holds: every spec field's own limit (``workbench.specs.MAX_COUNT`` and
``MAX_FLOAT``, at most 2**40: a global batch, an NVMe size) fits below it, so a value too large is refused in red
by the spec, naming it, rather than clamped by the box without a word (an imported 10**12 global batch was shown as
10**9)."""


def int_text(description: str, tooltip: str = "", minimum: int = 0) -> ipw.BoundedIntText:
    """An integer box that reports its value on Enter or blur (``continuous_update=False``)."""
    return ipw.BoundedIntText(description=description, min=minimum, max=BOX_MAX, continuous_update=False,
                              layout=control_layout(), style=style(), tooltip=tooltip or description)


def float_text(description: str, tooltip: str = "") -> ipw.BoundedFloatText:
    return ipw.BoundedFloatText(description=description, min=0.0, max=float(BOX_MAX), continuous_update=False,
                                layout=control_layout(), style=style(), tooltip=tooltip or description)


def dropdown(description: str, options, tooltip: str = "") -> ipw.Dropdown:
    return ipw.Dropdown(description=description, options=list(options), layout=control_layout(), style=style(),
                        tooltip=tooltip or description)


def checkbox(description: str, tooltip: str = "") -> ipw.Checkbox:
    return ipw.Checkbox(description=description, indent=False, layout=ipw.Layout(width="auto"),
                        tooltip=tooltip or description)


def error_message(exc: BaseException) -> str:
    """One line for the user: a ``ValueError``'s own message; anything else named by its type (a bug shows as such,
    still in red, never as a traceback out of a click handler)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, ValueError):
        return first or "invalid input"
    return f"{exc.__class__.__name__}: {first}" if first else exc.__class__.__name__


def error_html(message: str, max_width: str = "330px") -> str:
    """Inline error text (the core's ``ValueError`` message) — never a traceback."""
    if not message:
        return ""
    return (f'<div class="wb-error" style="color:#b00020;background:#fdecea;border-left:4px solid #b00020;'
            f'padding:4px 8px;margin:4px 0;max-width:{max_width};white-space:normal">{html.escape(message, quote=False)}</div>')


class Panel:
    """A panel owns its widgets, sends actions through ``dispatch`` and shows a state through :meth:`show`.

    Widget observers are silenced while :meth:`show` writes values, so showing a state never sends an action back.
    """

    title = ""
    parts: tuple = ()
    """Which state parts' errors this panel shows inline (``model``, ``cluster``, ``plan``, ``estimate``)."""

    def __init__(self, dispatch: Optional[Callable] = None) -> None:
        self._dispatch = dispatch
        self._syncing = False
        self.error = ipw.HTML("", layout=ipw.Layout(width="auto"))
        self.error.add_class("wb-error-box")
        if self.parts:
            self.error.add_class(f"wb-error-{self.parts[0]}")

    def set_dispatch(self, dispatch: Callable) -> None:
        self._dispatch = dispatch

    @contextmanager
    def syncing(self):
        self._syncing, previous = True, self._syncing
        try:
            yield
        finally:
            self._syncing = previous

    def send(self, action) -> None:
        if self._syncing or self._dispatch is None:
            return
        self._dispatch(action)

    def show_error(self, state) -> None:
        message = state.error if state.error_source in self.parts else ""
        text = error_html(message)
        if self.error.value != text:
            self.error.value = text

    @staticmethod
    def set_value(widget, value) -> None:
        """Write a value only when it differs (each write is a message to the browser)."""
        if widget.value != value:
            widget.value = value

    def close(self) -> None:
        for name, value in list(vars(self).items()):
            if isinstance(value, ipw.Widget):
                value.close()


def sync_figures(widget) -> None:
    """Copy each plotly ``FigureWidget``'s current data and layout into its synced state, for the whole tree.

    plotly sends later edits as messages, and copies the figure into the state a new browser view starts from only
    when the figure itself is displayed — not when it sits inside a ``VBox`` or ``Tab``. Call this before displaying
    a container that holds figures drawn before display.
    """
    from copy import deepcopy

    from plotly.basewidget import BaseFigureWidget

    stack = [widget]
    while stack:
        w = stack.pop()
        if isinstance(w, BaseFigureWidget):
            w._widget_layout = deepcopy(w._layout_obj._props)
            w._widget_data = deepcopy(w._data)
        stack.extend(getattr(w, "children", ()) or ())


@contextmanager
def redraw(fig):
    """``with redraw(fig):`` edit a ``FigureWidget`` as one update, then copy the result into its synced state.

    The edits reach the browser views that are listening as plotly messages; the synced copy is what a view made
    later starts from (a figure in a tab opened later, a second browser window, or a figure whose browser model
    started late: anywidget gives a model 2 s to load plotly's bundle, which a loaded machine can miss, and such a
    model hears no messages). Without it such a figure stays empty.
    """
    with fig.batch_update():
        yield fig
    sync_figures(fig)


SERVED_BUNDLE = "voila/templates/workbench/static/plotly-widgetbundle.js"
"""Where ``make dashboard`` puts a copy of plotly's widget bundle (under ``share/jupyter``), served by Voila."""
_bundle_url: Optional[str] = None


def plotly_bundle_file() -> str:
    """The installed plotly's FigureWidget JavaScript bundle (about 5 MB)."""
    import os

    import plotly

    return os.path.join(os.path.dirname(plotly.__file__), "package_data", "widgetbundle.js")


def served_bundle_url(environ) -> Optional[str]:
    """The URL of the served copy of plotly's bundle for a dashboard under Voila, or None (not under Voila, no
    copy on ``JUPYTER_PATH``, or a copy of another plotly version).

    Each ``FigureWidget`` otherwise ships the whole 5 MB bundle in its own widget state, and the browser evaluates
    it once per figure: tens of megabytes and seconds per figure at first render, and anywidget gives each figure
    2 s to load. A URL is fetched and evaluated once per page (the module is cached)."""
    import os
    from urllib.parse import urlsplit

    request = environ.get("VOILA_REQUEST_URL")
    if not request:
        return None
    try:
        size = os.path.getsize(plotly_bundle_file())
    except OSError:
        return None
    for root in filter(None, environ.get("JUPYTER_PATH", "").split(os.pathsep)):
        copy = os.path.join(root, *SERVED_BUNDLE.split("/"))
        if os.path.isfile(copy) and os.path.getsize(copy) == size:
            parts = urlsplit(request)
            base = (environ.get("VOILA_BASE_URL") or "/").rstrip("/")
            return f"{parts.scheme}://{parts.netloc}{base}/{SERVED_BUNDLE}"
    return None


def use_served_bundle(url: Optional[str]) -> None:
    """Figures made by :func:`new_figure` from now on load plotly's bundle from ``url`` (None: inline)."""
    global _bundle_url
    _bundle_url = url


def new_figure():
    """A plotly ``FigureWidget``; loads its JavaScript from the served bundle when :func:`use_served_bundle` set
    one."""
    import plotly.graph_objects as go

    fig = go.FigureWidget()
    if _bundle_url:
        fig._esm = _bundle_url
    return fig


class View:
    """Base of the figure views: ``widget`` to display, ``show(state)`` to redraw, ``close()``."""

    title = ""
    eager = False
    """Draw at construction even when its tab is hidden (cheap views), so the first display carries the figure."""

    @classmethod
    def available(cls, state) -> bool:
        """Whether the core computes what this view draws (e.g. the estimate carries a layout)."""
        return True

    def _repr_mimebundle_(self, **kwargs):
        sync_figures(self.widget)
        return self.widget._repr_mimebundle_(**kwargs)

    def close(self) -> None:
        stack = [self.widget]
        while stack:
            w = stack.pop()
            stack.extend(getattr(w, "children", ()) or ())
            w.close()
