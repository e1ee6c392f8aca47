# Two commands do all set-up on a fresh machine: `make train` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv train test lint docs bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev,docs]"
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/pathgrad train

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples mkdocs_hooks.py
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --dist loadgroup --durations=15

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples mkdocs_hooks.py

bench: $(STAMP)
	$(PY) benchmarks/overhead.py

clean:
	rm -rf $(VENV) runs outputs site .pytest_cache
