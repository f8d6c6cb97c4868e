#!/usr/bin/env bash
# Install lightmarl with its test tools into ./.venv and run the default test suite
# (slow and GPU tests are left out; run them with `.venv/bin/pytest -m slow` / `-m gpu`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh test
"${LIGHTMARL_VENV:-.venv}/bin/python" -m pytest "$@"
