# Puts this checkout first on sys.path so the suite tests the tree it lives in.
from pathlib import Path

import pytest

# How `make test` spreads the suite over one pytest-xdist worker per core (``-n auto --dist loadfile``): a test
# file's tests stay together on one worker (module-scoped fixtures, such as the launcher tests' shared runs, start
# once); the files that launch training processes form one unit, run one after another on one worker and handed
# out first, so that the other worker takes the rest of the suite beside them; the two browser tests form another.
_ONE_UNIT = {"launch": ("test_runs_", "test_run_launcher_rule", "test_notebook_launch_runs",
                        "test_widgets_launch_view", "test_widgets_run_monitor"),
             "browser": ("test_dashboard_browser", "test_jupyterlab_browser")}


def _unit(stem: str):
    """The unit a test file belongs to (``None``: its own)."""
    return next((unit for unit, prefixes in _ONE_UNIT.items() if stem.startswith(prefixes)), None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the launch unit first, then the browser one, then the rest
        items.sort(key=lambda item: {"launch": 0, "browser": 1}.get(_unit(item.path.stem), 2))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Units(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return _unit(Path(scope).stem) or scope

    return Units(config, log)
