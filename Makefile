# The README's two commands, and a few conveniences.
.PHONY: quickstart test lint bench

quickstart:  ## install, train the quickstart recipe, evaluate it against a random policy
	scripts/quickstart.sh

test:  ## install test tools and run the default test suite
	scripts/test.sh

lint:  ## ruff + mypy (needs `scripts/install.sh dev`)
	.venv/bin/ruff check src tests benchmarks examples && .venv/bin/ruff format --check src tests benchmarks examples && .venv/bin/mypy

bench:  ## environment / collector speed table
	.venv/bin/python benchmarks/collector_speed.py
