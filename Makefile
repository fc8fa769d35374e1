# Set-up is part of each target, so a fresh machine needs nothing else.
PY ?= python3
# The CPU build of torch this project is developed against; any torch>=2.4 works.
TORCH_PIN ?= torch==2.13.0

.PHONY: setup browser demo test bench bench-quick lint

setup:
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_PIN)"
	@$(PY) -m pip install -q -e ".[test]"

# Debian's chromium renders the HTML reprs in the browser test (skipped, with the reason, if absent).
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1; } || \
	  echo "chromium could not be installed: the browser test will be skipped"

demo: setup
	$(PY) examples/demo.py

test: setup browser
	$(PY) -m pytest

bench: setup
	$(PY) -m pip install -q matplotlib jax
	$(PY) benchmarks/run.py

# 3 short rounds a case: a few minutes on 2 cores (the spread column shows the noise)
bench-quick: setup
	$(PY) benchmarks/run.py --quick

lint:
	ruff check . && ruff format --check .
