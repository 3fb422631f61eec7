# The two commands (see README): `make run` and `make test`. Both set up a fresh machine first.
.PHONY: setup run test bench

setup:
	@./scripts/bootstrap.sh

run: setup
	.venv/bin/adev fleet --width 12

test: setup
	.venv/bin/python -m pytest -q -ra

bench: setup
	@for b in bench/*.py; do echo "== $$b"; .venv/bin/python $$b; done
