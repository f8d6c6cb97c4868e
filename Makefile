# The README's two commands, and a few conveniences.
.PHONY: quickstart test lint bench docs docs-check results

quickstart:  ## install, train the quickstart recipe, evaluate it against a random policy
	scripts/quickstart.sh

test:  ## install test tools and run the default test suite
	scripts/test.sh

lint:  ## ruff + mypy (needs `scripts/install.sh dev`)
	.venv/bin/ruff check src tests benchmarks examples && .venv/bin/ruff format --check src tests benchmarks examples && .venv/bin/mypy

bench:  ## environment / collector speed table
	.venv/bin/python benchmarks/collector_speed.py

docs:  ## serve the documentation site at http://127.0.0.1:8000 (needs the docs or test extra)
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve

docs-check:  ## build the documentation site with --strict (a broken link or API reference fails)
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site

results:  ## rewrite the result tables in the docs from benchmarks/results/*.json
	.venv/bin/python scripts/render_results.py
