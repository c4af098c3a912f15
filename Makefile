# Two commands do all set-up on a fresh machine: `make tune` and `make test`.
# Both create .venv and install flashgen into it (editable) the first time.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.flashgen-installed
PYTEST_ARGS ?=

.PHONY: install tune test test-fast bench lint typecheck clean

install: $(STAMP)

# Where a CPU build of torch 2.13.0 lies on local disk (pip's configured find-links; the probe
# downloads nothing from the network), install it first so that the bare `torch` requirement
# is already met and no multi-GB CUDA build is fetched. Elsewhere the probe fails fast and pip
# resolves torch normally: users are not pinned to 2.13.0.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if $(PY) -m pip download -q --no-index --no-deps torch==2.13.0 -d $(VENV)/.torch-probe \
	    >/dev/null 2>&1; then $(PY) -m pip install -q torch==2.13.0; \
	  else echo "no local torch 2.13.0 wheel here: torch comes from the index"; fi
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

tune: $(STAMP)
	$(VENV)/bin/flashgen tune

test: $(STAMP)
	scripts/with-postgres.sh $(PY) -m pytest -n 2 $(PYTEST_ARGS)

# GPU only: forward and forward+backward correctness and speed against SDPA (JSON into OUT),
# then `flashgen bench` on its default grid (JSON, CSV and, with matplotlib, a plot into OUT).
bench: $(STAMP)
	OUT=$${OUT:-benchmarks/out} $(PY) benchmarks/gpu_check.py
	OUT=$${OUT:-benchmarks/out} $(PY) benchmarks/gpu_check_bwd.py
	out=$${OUT:-benchmarks/out}; $(VENV)/bin/flashgen bench --json $$out/bench.json \
	    --csv $$out/bench.csv $$($(PY) -c 'import matplotlib' 2>/dev/null && echo --plot $$out/bench.png)

lint: $(STAMP)
	$(VENV)/bin/ruff check flashgen tests benchmarks
	$(VENV)/bin/ruff format --check flashgen tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build dist *.egg-info
