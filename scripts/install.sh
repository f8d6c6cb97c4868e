#!/usr/bin/env bash
# Create ./.venv (or $LIGHTMARL_VENV) and install lightmarl into it, editable, with the example
# recipes' game-specific code (examples/: the lightmarl-examples distribution), editable too.
#   scripts/install.sh            # runtime only
#   scripts/install.sh test       # + test tools
#   scripts/install.sh dev        # + test tools, ruff, mypy
# torch is installed first and pinned (TORCH_SPEC, default torch==2.13.0) so that no later
# requirement pulls a different, multi-GB build. On a machine without a GPU, make sure pip
# resolves TORCH_SPEC to a CPU wheel (on this project's CI machines the CPU wheel is local).
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
venv="${LIGHTMARL_VENV:-.venv}"
torch_spec="${TORCH_SPEC:-torch==2.13.0}"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install "$torch_spec"
if [ -n "$extra" ]; then
  "${pip[@]}" install -e ".[$extra]" -e ./examples "$torch_spec"
else
  "${pip[@]}" install -e . -e ./examples "$torch_spec"
fi
echo "lightmarl installed in $venv ($("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
