"""The quickstart notebook in JupyterLab, in Debian's Chromium: run all cells and check that the workbench's widgets
and its plotly figure render (not just a text fallback). Screenshot: ``test-output/jupyterlab-quickstart.png``.

Same browser rules as the dashboard test: /usr/bin/chromium, no downloads, fail in CI when missing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, OUTPUT, ROOT, free_port, require_chromium, stop, \
    wait_for_port

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_quickstart_widgets_render_in_jupyterlab(tmp_path):
    require_chromium()
    from playwright.sync_api import sync_playwright

    OUTPUT.mkdir(exist_ok=True)
    work = tmp_path / "notebooks"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", work / "quickstart.ipynb")  # the committed copy stays clean
    port = free_port()
    log = OUTPUT / "jupyterlab.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws")}
    labconfig = tmp_path / "jupyter-config" / "labconfig"
    labconfig.mkdir(parents=True)
    # no "get news?" pop-up over the widgets
    (labconfig / "page_config.json").write_text(
        '{"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": true}}')
    jupyter = Path(sys.executable).with_name("jupyter")
    cmd = [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
           "--LabApp.expose_app_in_browser=True", f"--ServerApp.root_dir={work}", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--ServerApp.terminals_enabled=False"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_for_port(port, proc, log, timeout_s=90)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1100})
                page.goto(f"http://127.0.0.1:{port}/lab/tree/quickstart.ipynb", timeout=120_000)
                page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=120_000)
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
                page.wait_for_function(
                    "() => { const w = window.jupyterapp.shell.currentWidget;"
                    " return w && w.sessionContext && w.sessionContext.session"
                    " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }",
                    timeout=120_000)
                page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
                page.wait_for_selector(".wb-app .wb-peak", timeout=180_000)
                page.wait_for_function("() => { const gd = document.querySelector('.wb-app .js-plotly-plot');"
                                       " return gd && gd.data && gd.data.length > 0 && gd.data[0].y"
                                       " && gd.data[0].y.length > 0; }", timeout=60_000)
                errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
                tracebacks = [t for t in errors.all_inner_texts() if "Traceback" in t or "Error" in t]
                assert not tracebacks, tracebacks
                page.locator(".wb-app").scroll_into_view_if_needed()
                peak = page.evaluate("() => Number(document.querySelector('.wb-app .wb-peak').dataset.bytes)")
                assert peak > 0
                assert page.locator(".wb-app .wb-tp input").count() == 1  # a real widget, not a text repr
                page.locator(".wb-app").screenshot(path=str(OUTPUT / "jupyterlab-quickstart.png"))
            finally:
                browser.close()
    finally:
        stop(proc)
