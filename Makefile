# Two commands do all set-up on a fresh machine with Python >= 3.11 and pip:
#   make lab   - create .venv, install, start JupyterLab on notebooks/
#   make test  - create .venv, install, run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
REQS   := environments/requirements-cpu.txt
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.cache/torch_extensions
export MPLBACKEND = Agg

.PHONY: lab test dashboard venv bench clean

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
	$(BIN)/jupyter lab --notebook-dir=notebooks

dashboard: venv
	$(BIN)/voila notebooks/dashboard.ipynb --no-browser --Voila.ip=127.0.0.1 --port=8866

test: venv
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: venv
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache test-output
