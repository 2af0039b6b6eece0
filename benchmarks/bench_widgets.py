"""Latency from a widget change to updated figures, in-process, for the guide's 13B example.

Starts the ``Workbench`` on ``guide-13b`` with Megatron TP4 × PP2 on 8 × A100-80GB, then sets widget values the way
a user does (``.value = ...`` on the parallel panel's controls, cycling through valid plans) and times each change
until the state is reduced, the estimate computed, the figures redrawn and every widget message JSON-encoded as the
kernel would send it (a comm that serializes each message stands in for the kernel's). Network transport and
browser rendering are not included. Target: p95 ≤ 50 ms.

Also timed: pressing the Planner's Search (the whole plan search, the ranked table and the scatter) and opening the
Advisor tab after a change (advice with the OOM ladder, the waterfall and the tables) — the two views that compute
on demand rather than on every change.

Run: ``.venv/bin/python benchmarks/bench_widgets.py [--repeats N]``
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import comm  # noqa: E402
from comm.base_comm import BaseComm  # noqa: E402
from jupyter_client.jsonutil import json_default  # noqa: E402


class SerializingComm(BaseComm):
    """Encodes every message to JSON like the kernel's session does, then drops it; counts the bytes."""

    sent_bytes = 0
    sent_messages = 0

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        text = json.dumps({"msg_type": msg_type, "content": {"data": data, "comm_id": self.comm_id, **keys},
                           "metadata": metadata or {}}, default=json_default)
        SerializingComm.sent_bytes += len(text) + sum(len(memoryview(b)) for b in (buffers or ()))
        SerializingComm.sent_messages += 1


comm.create_comm = SerializingComm

from widgets.app import Workbench  # noqa: E402
from widgets.state import SetPlan, reduce  # noqa: E402

# (control, value) changes; each cycle returns to the guide's plan, all of them valid.
CHANGES = [("tensor_parallel", 2), ("tensor_parallel", 4), ("micro_batch_size", 2), ("micro_batch_size", 1),
           ("recompute", "full"), ("recompute", "selective"), ("recompute", "none"), ("pipeline_parallel", 1),
           ("pipeline_parallel", 2), ("sequence_parallel", True), ("sequence_parallel", False)]


def percentile(values, q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[k]


def measure(fn, repeats: int) -> list:
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=220)
    args = ap.parse_args(argv)

    app = Workbench()
    panel = next(p for p in app.panels if p.title == "Parallelism")
    assert app.state.valid and app.state.plan.tensor_parallel == 4 and app.state.plan.pipeline_parallel == 2

    def widget_change(i):
        name, value = CHANGES[i % len(CHANGES)]
        panel.controls[name].value = value
        if not app.state.valid:
            raise SystemExit(f"benchmark change {name}={value} was rejected: {app.state.error}")

    def widget_change_all_views(i):
        widget_change(i)
        for view in app.views:
            view.show(app.state)

    state = app.state

    def reducer_only(i):
        nonlocal state
        name, value = CHANGES[i % len(CHANGES)]
        state = reduce(state, SetPlan(changes={name: value}))

    for fn in (widget_change, widget_change_all_views, reducer_only):  # warm caches and plotly validators
        measure(fn, len(CHANGES))

    def tab_after_change(title):
        index = next(k for k, v in enumerate(app.views) if v.title == title)

        def fn(i):
            app.view_tabs.selected_index = 0
            widget_change(i)
            app.view_tabs.selected_index = index  # the tab's view redraws for the new state
        return fn

    planner = next((v for v in app.views if v.title == "Planner"), None)
    extra = []
    if planner is not None:
        planner.show(app.state)
        extra.append(("Planner: Search pressed (search + table + plot)",
                      measure(lambda i: planner.search_button.click(), max(10, args.repeats // 10))))
    if any(v.title == "Advisor" for v in app.views):
        extra.append(("widget change -> Advisor tab opened", measure(tab_after_change("Advisor"),
                                                                     max(20, args.repeats // 5))))
    app.view_tabs.selected_index = 0
    SerializingComm.sent_bytes = SerializingComm.sent_messages = 0
    rows = [("reduce + estimate (no drawing)", measure(reducer_only, args.repeats)),
            ("widget change -> visible figures", measure(widget_change, args.repeats)),
            (f"widget change -> all {len(app.views)} views redrawn", measure(widget_change_all_views, args.repeats))]
    rows += extra
    print(f"guide-13b, Megatron TP4 x PP2, 8 x A100-80GB; {args.repeats} changes each; views: "
          + ", ".join(v.title for v in app.views))
    print(f"{'path':46s} {'p50 ms':>8s} {'p95 ms':>8s} {'max ms':>8s}")
    for label, times in rows:
        ms = [t * 1e3 for t in times]
        print(f"{label:46s} {statistics.median(ms):8.2f} {percentile(ms, 95):8.2f} {max(ms):8.2f}")
    print(f"widget messages encoded: {SerializingComm.sent_messages} ({SerializingComm.sent_bytes / 1e6:.1f} MB)")
    p95 = percentile([t * 1e3 for t in rows[1][1]], 95)  # rows[1]: widget change -> visible figures
    print(f"target p95 <= 50 ms (widget change -> visible figures): {'met' if p95 <= 50 else 'NOT met'} "
          f"({p95:.2f} ms)")
    app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
