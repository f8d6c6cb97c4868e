#!/usr/bin/env bash
# Install lightmarl with its test tools into ./.venv and run the default test suite
# (slow and GPU tests are left out; run them with `.venv/bin/pytest -m slow` / `-m gpu`).
# The suite runs on one pytest-xdist worker per CPU this process may use (docs/testing.md):
# PYTEST_XDIST_AUTO_NUM_WORKERS=N sets another count, and `scripts/test.sh -n 0` runs it in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh test
"${LIGHTMARL_VENV:-.venv}/bin/python" -m pytest -n logical --dist worksteal "$@"
