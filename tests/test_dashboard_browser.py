"""The Voila dashboard in a real browser: serve notebooks/dashboard.ipynb as ``make dashboard`` does (voila.json,
the offline template), load it in Debian's Chromium through Playwright, change the tensor-parallel size and check
that the memory number and the memory figure change; open every tab and check that each figure has drawn marks in
the page (SVG paths or images inside the plot area, not only data); check that an invalid TP or DeepSpeed-Ulysses size
is the core's message in red; check the Pipeline toggles redraw; check that
nothing is fetched from another host; close the page and check that its kernel is culled.

Needs /usr/bin/chromium (``apt-get install chromium``); never downloads a browser. In CI (``CI=true``) a missing
Chromium fails the test; locally it skips with the reason. Screenshots go to ``test-output/``.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
OUTPUT = ROOT / "test-output"

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def require_chromium() -> None:
    if os.path.exists(CHROMIUM):
        return
    reason = f"{CHROMIUM} is missing (apt-get install -y chromium)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"voila exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"voila did not listen on port {port} within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


def start_voila(port: int, log: Path, extra_env=None, extra_args=()) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "JUPYTER_PATH": str(ROOT / "share" / "jupyter")}  # as `make dashboard`: the offline template
    env.pop(("WORKBENCH_DASHBOARD_ALLOW_LAUNCH"), None)
    env.pop(("WORKBENCH_DASHBOARD_ALLOW_WRITE"), None)
    env.update(extra_env or {})
    # as `make dashboard`: one served copy of plotly's widget bundle instead of one inside every figure's state
    import shutil

    from widgets.common import SERVED_BUNDLE, plotly_bundle_file

    bundle = ROOT / "share" / "jupyter" / Path(*SERVED_BUNDLE.split("/"))
    bundle.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plotly_bundle_file(), bundle)
    voila = Path(sys.executable).with_name("voila")
    cmd = [str(voila), "notebooks/dashboard.ipynb", "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
           *extra_args]
    # A session of its own, so stopping it by its pid also ends the kernels it started.
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


PEAK_JS = "() => Number(document.querySelector('.wb-peak').dataset.bytes)"
# The memory figure is the first plotly graph; its traces' y values (GiB per stage, per term).
FIGURE_JS = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  return gd && gd.data ? gd.data.map(t => Array.from(t.y || [])) : null;
}"""

# A view's first plotly graph has drawn points (VIEW: the view's class).
PLOT_HAS_POINTS_JS = """() => {
  const gd = document.querySelector('.VIEW .js-plotly-plot');
  return !!(gd && gd.data && gd.data.length && gd.data[0].x && gd.data[0].x.length > 0);
}"""

# Drawn marks of each plotly figure visible on the page: SVG paths and images inside its plot area with a size.
VISIBLE_MARKS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => gd.offsetParent !== null)
  .map(gd => Array.from(gd.querySelectorAll('.cartesianlayer .overplot path, .cartesianlayer .overplot image'))
    .filter(el => { const b = el.getBoundingClientRect(); return b.width > 0 && b.height > 0; }).length)"""

# The visible figures' titles and x-axis titles as drawn (SVG text).
VISIBLE_TITLES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => gd.offsetParent !== null)
  .map(gd => [(gd.querySelector('.gtitle') || {}).textContent || '', (gd.querySelector('.xtitle') || {}).textContent || ''])"""


def kernel_count(proc: subprocess.Popen) -> int:
    """ipykernel processes started by the voila server."""
    import psutil

    def is_kernel(c) -> bool:
        try:
            return any("ipykernel" in part for part in c.cmdline())
        except (psutil.ZombieProcess, psutil.NoSuchProcess):  # a kernel that just exited (culled) is gone
            return False

    return sum(1 for c in psutil.Process(proc.pid).children(recursive=True) if is_kernel(c))


def open_tab(page, title: str) -> None:
    page.locator(".lm-TabBar-tab", has_text=title).first.click()
    page.wait_for_timeout(300)


def wait_for_marks(page, timeout_ms: int = 60_000) -> list:
    """Wait until every visible figure has drawn marks; return the counts."""
    page.wait_for_function(f"() => {{ const m = ({VISIBLE_MARKS_JS})(); return m.length > 0 && m.every(n => n > 0); }}",
                           timeout=timeout_ms)
    return page.evaluate(VISIBLE_MARKS_JS)


# An element shows a text (widgets update one message at a time: wait for each, do not assume an order).
TEXT_JS = "() => {{ const e = document.querySelector('{selector}'); return !!(e && e.innerText.includes('{text}')); }}"


def test_dashboard_changes_memory_in_chromium():
    require_chromium()
    from playwright.sync_api import sync_playwright

    OUTPUT.mkdir(exist_ok=True)
    port = free_port()
    log = OUTPUT / "voila-dashboard.log"
    # voila.json's culling, with short times so the test sees it
    proc = start_voila(port, log, extra_args=["--MappingKernelManager.cull_idle_timeout=4",
                                              "--MappingKernelManager.cull_interval=2"])
    try:
        wait_for_port(port, proc, log)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1000})
                hosts = set()
                page.on("request", lambda r: hosts.add(r.url.split("/")[2]) if r.url.startswith("http") else None)
                page.goto(f"http://127.0.0.1:{port}/", timeout=120_000)
                page.wait_for_selector(".wb-peak", timeout=120_000)
                page.wait_for_function("() => { const gd = document.querySelector('.js-plotly-plot');"
                                       " return gd && gd.data && gd.data.length > 0 && gd.data[0].y"
                                       " && gd.data[0].y.length > 0; }", timeout=60_000)
                peak_before = page.evaluate(PEAK_JS)
                figure_before = page.evaluate(FIGURE_JS)
                # kept as the page's own JSON text, so the comparison below does not depend on number formatting
                page.evaluate(f"() => {{ window.wbFigureBefore = JSON.stringify(({FIGURE_JS})()); }}")
                assert peak_before > 0
                page.screenshot(path=str(OUTPUT / "dashboard-before.png"), full_page=True)

                # The guide's example is TP4 x PP2 on 8 GPUs; TP2 keeps PP2 and gives DP2.
                tp = page.locator(".wb-tp input")
                tp.fill("2")
                tp.press("Enter")
                page.wait_for_function(f"() => Number(document.querySelector('.wb-peak').dataset.bytes)"
                                       f" !== {peak_before}", timeout=30_000)
                # the figure redraws in the browser after the number (plotly renders asynchronously; slow on a
                # loaded machine)
                page.wait_for_function(f"() => JSON.stringify(({FIGURE_JS})()) !== window.wbFigureBefore",
                                       timeout=90_000)
                peak_after = page.evaluate(PEAK_JS)
                figure_after = page.evaluate(FIGURE_JS)
                assert peak_after != peak_before
                assert figure_after != figure_before
                assert "DP 2" in page.inner_text(".wb-plan-derived")

                # An invalid value is explained inline, and the numbers stay at the last valid plan.
                tp.fill("3")
                tp.press("Enter")
                page.wait_for_selector(".wb-error", timeout=30_000)
                assert "tensor_parallel(3)" in page.inner_text(".wb-error-plan")
                assert page.evaluate(PEAK_JS) == peak_after
                page.screenshot(path=str(OUTPUT / "dashboard.png"), full_page=True)
                assert "Traceback" not in page.content()

                # DeepSpeed-Ulysses is in the Parallelism panel; an N the plan refuses is the core's message in red
                tp.fill("4")
                tp.press("Enter")
                page.wait_for_selector(".wb-error-plan .wb-error", state="detached", timeout=30_000)
                # the panel's controls are in sections: Ulysses is under "Long context" (one section open at a time)
                assert page.locator(".wb-ulysses input").is_hidden()
                page.locator(".wb-plan-groups .jupyter-widget-Collapse-header", has_text="Long context").click()
                ulysses = page.locator(".wb-ulysses input")
                ulysses.wait_for(state="visible", timeout=30_000)
                assert page.locator(".wb-tp input").is_hidden()
                assert "DeepSpeed-Ulysses" in page.inner_text(".wb-ulysses")
                ulysses.fill("3")
                ulysses.press("Enter")
                page.wait_for_selector(".wb-error-plan .wb-error", timeout=30_000)
                assert "ulysses=3" in page.inner_text(".wb-error-plan")
                assert page.evaluate("() => getComputedStyle(document.querySelector('.wb-error-plan .wb-error'))"
                                     ".color") == "rgb(176, 0, 32)"
                page.screenshot(path=str(OUTPUT / "dashboard-ulysses-error.png"), full_page=True)
                ulysses.fill("1")
                ulysses.press("Enter")
                page.wait_for_selector(".wb-error-plan .wb-error", state="detached", timeout=30_000)

                # The planner tab searches when opened: the ranked table and the scatter show up.
                page.locator(".lm-TabBar-tab", has_text="Planner").click()
                page.wait_for_selector(".wb-planner-table tr.wb-planner-row", timeout=60_000)
                assert page.locator(".wb-planner-table tr.wb-planner-row").count() == 10
                page.wait_for_function(TEXT_JS.format(selector=".wb-planner-status", text="plans evaluated"),
                                       timeout=30_000)
                page.wait_for_function(TEXT_JS.format(selector=".wb-planner-explanation", text="Fastest:"),
                                       timeout=30_000)
                page.wait_for_function(PLOT_HAS_POINTS_JS.replace("VIEW", "wb-planner"), timeout=90_000)
                page.set_viewport_size({"width": 1500, "height": 1900})
                page.screenshot(path=str(OUTPUT / "dashboard-planner.png"), full_page=True)
                # The advisor tab: the checks as rows, the diagnostic commands.
                page.locator(".lm-TabBar-tab", has_text="Advisor").click()
                page.wait_for_selector(".wb-advisor-checks tr.wb-check", timeout=60_000)
                page.wait_for_function(TEXT_JS.format(selector=".wb-advisor-commands", text="nsys profile"),
                                       timeout=30_000)
                page.wait_for_function(PLOT_HAS_POINTS_JS.replace("VIEW", "wb-advisor"), timeout=90_000)
                page.set_viewport_size({"width": 1500, "height": 2600})
                page.screenshot(path=str(OUTPUT / "dashboard-advisor.png"), full_page=True)
                # No launch tab on a dashboard served without WORKBENCH_DASHBOARD_ALLOW_LAUNCH=1.
                assert page.locator(".lm-TabBar-tab", has_text="Launch").count() == 0
                assert page.locator(".wb-launch-button").count() == 0

                # Every tab: each figure on it has drawn marks (bars, cells, points, lines), not only data.
                page.set_viewport_size({"width": 1500, "height": 1100})
                drawn = {}
                for title in ("Memory", "Step time", "Layout", "Pipeline", "Planner", "Advisor"):
                    open_tab(page, title)
                    drawn[title] = wait_for_marks(page)
                    name = title.lower().replace(" ", "-")
                    page.screenshot(path=str(OUTPUT / f"dashboard-tab-{name}.png"), full_page=True)
                assert all(n > 0 for counts in drawn.values() for n in counts), drawn
                for title in ("Configs", "Profile"):  # no figures: text only
                    open_tab(page, title)
                    page.screenshot(path=str(OUTPUT / f"dashboard-tab-{title.lower()}.png"), full_page=True)
                # The step-time view: the step with its error band, tokens/s and MFU above the bar.
                open_tab(page, "Step time")
                summary = page.inner_text(".wb-time-summary")
                assert "Step time:" in summary and " / −" in summary and "tokens/s" in summary and "MFU" in summary
                # The layout grid has its colour key.
                open_tab(page, "Layout")
                assert "colour = tensor-parallel group" in page.inner_text(".wb-layout-legend")

                # Pipeline: the toggles redraw the drawn chart (title and axis title as SVG text).
                open_tab(page, "Pipeline")
                [(title, axis)] = page.evaluate(VISIBLE_TITLES_JS)
                assert title.startswith("1f1b: p=2, m=128") and axis.startswith("seconds")
                page.locator(".wb-pipeline-kind button", has_text="gpipe").click()
                page.wait_for_function(f"() => ({VISIBLE_TITLES_JS})()[0][0].startsWith('gpipe')", timeout=30_000)
                page.locator(".wb-pipeline-units button", has_text="relative").click()
                page.wait_for_function(f"() => ({VISIBLE_TITLES_JS})()[0][1].startsWith('time (forward')",
                                       timeout=30_000)
                assert wait_for_marks(page)[0] > 0
                page.screenshot(path=str(OUTPUT / "dashboard-tab-pipeline-gpipe-relative.png"), full_page=True)

                # Works offline: every request went to the dashboard's own server (no icon font from a CDN).
                assert hosts == {f"127.0.0.1:{port}"}, hosts
                assert kernel_count(proc) >= 1
                page.close()
            finally:
                browser.close()
        # The closed page's kernel is culled (voila.json: cull_idle_timeout, not while a page is connected).
        deadline = time.monotonic() + 60
        while kernel_count(proc) and time.monotonic() < deadline:
            time.sleep(1)
        assert kernel_count(proc) == 0
    finally:
        stop(proc)
    assert proc.poll() is not None

