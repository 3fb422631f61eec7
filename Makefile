# The two commands (see README): `make run` and `make test`. Both set up a fresh machine first.
# `make lint` is the lint and type check CI runs before the tests.
.PHONY: setup run test lint bench

setup:
	@./scripts/bootstrap.sh

run: setup
	.venv/bin/adev fleet --width 12

test: setup
	.venv/bin/python -m pytest -q -ra

# ruff (lint + import order) and mypy, as configured in pyproject.toml; CI runs it before the tests
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy

bench: setup
	@for b in bench/*.py; do echo "== $$b"; .venv/bin/python $$b; done
