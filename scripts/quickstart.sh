#!/usr/bin/env bash
# Install, train MAPPO on mpe2 simple_spread (recipes/quickstart.yaml), then evaluate the
# trained policy and, for comparison, a uniform-random policy on the same evaluation seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
lightmarl="${LIGHTMARL_VENV:-.venv}/bin/lightmarl"
recipe=recipes/quickstart.yaml

"$lightmarl" fit --config "$recipe" "$@"
echo "== trained policy (greedy), 32 evaluation episodes =="
"$lightmarl" validate --config "$recipe" --ckpt_path last --trainer.enable_progress_bar false
echo "== uniform-random policy, same 32 evaluation episodes =="
"$lightmarl" validate --config "$recipe" --trainer.enable_progress_bar false \
  --model.policy_bindings '[{id: random, class_path: lightmarl.policies.UniformRandomPolicy}]'
