# Two commands do all set-up on a fresh machine with Python >= 3.11 and pip:
#   make lab   - create .venv, install, start JupyterLab on notebooks/ (make lab PORT=9999 for another port)
#   make test  - create .venv, install, run the whole suite
#   make dashboard PORT=8866 - serve the Voila dashboard on 127.0.0.1:PORT
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
REQS   := environments/requirements-cpu.txt
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.cache/torch_extensions
export MPLBACKEND = Agg
PORT   ?=
# JupyterLab refuses to start as root unless told to (containers often run as root).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: lab test test-long dashboard venv bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python $(REQS) pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r $(REQS)
	$(BIN)/python -m pip install -q --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

venv: $(VENV)/.installed

lab: venv
	$(BIN)/jupyter lab --notebook-dir=notebooks $(ROOT_FLAG) $(if $(PORT),--port=$(PORT),)

# voila.json (read from this directory) selects the offline template in share/jupyter and culls kernels whose
# browser tab has closed.
# The dashboard serves one copy of plotly's widget bundle (each figure would otherwise carry its own 5 MB copy).
BUNDLE := share/jupyter/voila/templates/workbench/static/plotly-widgetbundle.js

dashboard: venv
	@mkdir -p $(dir $(BUNDLE))
	$(BIN)/python -c "import shutil, widgets.common as c; shutil.copyfile(c.plotly_bundle_file(), '$(BUNDLE)')"
	JUPYTER_PATH=$(CURDIR)/share/jupyter $(BIN)/voila notebooks/dashboard.ipynb --no-browser --Voila.ip=127.0.0.1 \
		--port=$(or $(PORT),8866)

# one worker per core, at most four (pytest-xdist; each worker holds torch and the libraries in memory);
# conftest.py keeps each test file on one worker and the training launches on one worker, one after another
test: venv
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder --durations=15 \
		$(PYTEST_ARGS)

# also the 8-process layout test of the guide's 13B (about a minute more on 2 cores)
test-long: venv
	WORKBENCH_LONG_TESTS=1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: venv
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache test-output .cache
