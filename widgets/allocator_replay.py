"""AllocatorReplay: under the Memory view, a button that replays PyTorch's caching allocator over the current plan's
traced training steps (:mod:`workbench.allocsim`, what ``workbench estimate --simulate-allocator`` does) and shows the
whole-device peak it gives beside the constant-reserve estimate. Only plans in the replay's scope (one GPU, the stacks
the study compared with measured runs) can replay; for the others it says why, in the core's words.

The logic is in pure functions over the app state (:func:`replay_source`, :func:`scope_text`,
:func:`replayed_summary_html`) so tests need no browser."""
from __future__ import annotations

import html
import time
from types import SimpleNamespace
from typing import Optional

import ipywidgets as ipw

from widgets.common import error_html, error_message, gib

def replay_source(state):
    """What :func:`workbench.estimate.estimate`'s ``simulate_allocator=`` needs for ``state``'s model: ``True`` for a
    megatron-core model (traced from its specs), the imported :class:`workbench.hf.HFModel` for a transformers model.
    ``ValueError`` when the plan is outside the replay's scope (:func:`workbench.allocsim.check_scope`), when a
    transformers model was not imported from a config.json, or when its fields were changed since the import."""
    from workbench.allocsim import check_config_model, check_scope, is_megatron

    model = state.model
    check_scope(model, state.plan)
    if is_megatron(model):
        return True
    hf = getattr(state, "hf_model", None)
    if hf is None:
        raise ValueError(f"transformers model {model.name} was not imported from a config.json: the replay builds "
                         f"the model from its Hugging Face config (paste it in the Import panel)")
    check_config_model(model, hf.spec)
    return hf


def scope_text(state) -> tuple:
    """``(ok, text)``: whether ``state``'s plan can be replayed and one line saying so or why not (the part of the
    core's refusal that names this plan)."""
    try:
        replay_source(state)
    except ValueError as exc:
        message = error_message(exc)
        _, sep, why = message.partition("; this plan has ")
        return False, (f"not for this plan: {why}" if sep else message)
    return True, ("this one-GPU plan is in the replay's scope: replay PyTorch's caching allocator over its traced "
                  "training steps for the whole-device peak (a few seconds; megatron-core models trace in a child "
                  "process)")


def replayed_summary_html(constant, replayed, seconds: Optional[float] = None) -> str:
    """One paragraph comparing the constant-reserve estimate's memory (``constant``, a ``MemoryEstimate``) with the
    replayed one's (``replayed``, an estimate made with ``simulate_allocator``)."""
    mem = replayed.memory
    peak, cap = mem.per_gpu_peak_bytes, mem.capacity_bytes
    band = ""
    if mem.band_high_bytes or mem.band_low_bytes:
        band = f" (+{gib(mem.band_high_bytes):.1f} / −{gib(mem.band_low_bytes):.1f} GiB)"
    verdict = "fits" if mem.fits_gpu else "<b style='color:#b00020'>does not fit</b>"
    peaks = replayed.replayed_peaks
    delta = peak - constant.per_gpu_peak_bytes
    took = f"; replayed in {seconds:.1f} s" if seconds is not None else ""
    return (f'<span class="wb-replayed-peak" data-bytes="{int(peak)}">Replayed allocator: peak per GPU '
            f"<b>{gib(peak):.2f} GiB</b>{band} of {gib(cap):.2f} GiB — {verdict}</span>"
            f" ({'+' if delta >= 0 else '−'}{abs(gib(delta)):.2f} GiB against the constant reserve's "
            f"{gib(constant.per_gpu_peak_bytes):.2f} GiB)"
            f'<br><span style="color:#555">The caching allocator reserves {gib(peaks.peak_reserved_bytes):.2f} GiB '
            f"at its peak for {gib(peaks.peak_allocated_bytes):.2f} GiB allocated "
            f"(reserve {float(replayed.reserve_fraction):.1%} above the estimate's allocated terms){took}. "
            f"Error band: {html.escape(mem.band_note)}</span>")


def replay_state(state):
    """What the replay needs of ``state``: the app's :class:`widgets.state.AppState`, or any object with an
    ``estimate`` (a notebook showing one estimate in the Memory view), whose evaluated plan then gives the specs.
    ``None`` when neither says which plan."""
    est = getattr(state, "estimate", None)
    specs = {name: getattr(state, name, None) or getattr(est, name, None) for name in ("model", "cluster", "plan")}
    if est is None or any(v is None for v in specs.values()):
        return None
    return SimpleNamespace(estimate=est, hf_model=getattr(state, "hf_model", None),
                           profile=getattr(state, "profile", None), **specs)


class AllocatorReplay:
    """The button, its scope line and the replayed result; :meth:`show` follows the app state (a new plan clears the
    result), :meth:`replay` runs on the button's click."""

    def __init__(self) -> None:
        self.button = ipw.Button(description="Replay allocator", icon="play",
                                 tooltip="Replay PyTorch's caching allocator over this plan's traced training steps "
                                         "(one GPU; workbench estimate --simulate-allocator)",
                                 layout=ipw.Layout(width="175px", min_width="175px"))
        self.button.add_class("wb-replay-button")
        self.status = ipw.HTML()
        self.status.add_class("wb-replay-status")
        self.result = ipw.HTML()
        self.result.add_class("wb-replay-result")
        self.widget = ipw.VBox([ipw.HBox([self.button, self.status]), self.result])
        self.button.on_click(lambda _b: self.replay())
        self._state = None
        self._key = None
        self._in_scope = False

    @staticmethod
    def _key_of(state):
        return (state.model, state.cluster, state.plan, state.hf_model, state.profile)

    def show(self, state) -> None:
        invalid = getattr(state, "valid", True) is False  # the app's inputs are refused: the charts show the last
        state = replay_state(state)                         # valid plan, which is not what the boxes say
        if state is None or invalid:  # nothing to replay: no plan shown, or not the plan the inputs say
            self._state = self._key = None
            self._in_scope = False
            self.button.disabled = True
            self.status.value = ('<span style="color:#555">Allocator replay: not while an input is refused (the '
                                 'charts show the last valid plan); fix the field in red to replay</span>'
                                 if invalid and state is not None else "")
            self.result.value = ""
            return
        key = self._key_of(state)
        if key == self._key:
            return
        self._state, self._key = state, key
        self._in_scope, text = scope_text(state)
        self.button.disabled = not self._in_scope
        self.status.value = f'<span style="color:#555">Allocator replay: {html.escape(text)}</span>'
        self.result.value = ""

    def replay(self) -> None:
        """Replay the current plan; a refusal or a failure is shown inline, never raised out of the click."""
        from workbench.estimate import estimate

        state = self._state
        if state is None:
            return
        self.button.disabled = True
        self.result.value = '<span style="color:#555">replaying the caching allocator…</span>'
        start = time.perf_counter()
        try:
            source = replay_source(state)
            replayed = estimate(state.model, state.cluster, state.plan, profile=state.profile, checks=False,
                                simulate_allocator=source)
        except Exception as exc:  # noqa: BLE001 - shown inline in red: a refusal, a missing library, a failed trace
            self.result.value = error_html(error_message(exc), max_width="640px")
        else:
            self.result.value = replayed_summary_html(state.estimate.memory, replayed,
                                                      time.perf_counter() - start)
        finally:
            self.button.disabled = not self._in_scope

    def close(self) -> None:
        self.widget.close()
