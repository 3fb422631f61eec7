# The two commands (see README): `make run` and `make test`. Both set up a fresh machine first.
# `make lint` is the lint and type check CI runs before the tests.
.PHONY: setup run test lint bench mutation

setup:
	@./scripts/bootstrap.sh

run: setup
	.venv/bin/adev fleet --width 12

# the tests also check the endpoint with a third-party client: AIPerf, in .venv-aiperf
test:
	@./scripts/bootstrap.sh --aiperf
	.venv/bin/python -m pytest -q -ra --durations=25

# ruff (lint + import order) and mypy, as configured in pyproject.toml; CI runs it before the tests
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy

# every benchmark but the mutation run (hours on 2 cores: `make mutation`)
bench: setup
	@for b in bench/*.py; do [ "$$b" = bench/bench_mutation.py ] && continue; echo "== $$b"; .venv/bin/python $$b; done

# mutation score of the unit tests over adev/analysis/ and the emulator's engine, pool and store
# (a benchmark, not a check); MODULES=... to choose, e.g. MODULES=adev/emulator/pool.py
mutation: setup
	.venv/bin/python bench/bench_mutation.py $(MODULES) --survivors
