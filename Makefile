# Set-up is part of each target, so a fresh machine needs nothing else.
PY ?= python3
# The CPU build of torch this project is developed against; any torch>=2.4 works.
TORCH_PIN ?= torch==2.13.0

.PHONY: setup demo test bench lint

setup:
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_PIN)"
	@$(PY) -m pip install -q -e ".[test]"

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest

bench: setup
	$(PY) -m pip install -q matplotlib
	$(PY) benchmarks/run.py

lint:
	ruff check . && ruff format --check .
