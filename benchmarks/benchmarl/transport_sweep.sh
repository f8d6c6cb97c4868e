#!/usr/bin/env bash
# MAPPO variants on VMAS transport (BenchMARL's task config), one `lightmarl fit` per core, all at
# once: what keeps the policy exploring until the package starts to move (docs/vmas.md, "Transport").
# For a machine with many cores lent for a few minutes; run from the repository root:
#
#   FRAMES=240000 SEEDS="0 1" LIMIT=480 bash benchmarks/benchmarl/transport_sweep.sh
#
# Each run is cut at LIMIT seconds (its evaluations so far are kept). Python packages missing on the
# machine (no index there) are installed from benchmarks/gpu/wheels (git-ignored) into a folder of
# their own. Writes $OUT/transport_sweep.tar.gz (every run's metrics.csv and log) and prints, per
# run, its greedy evaluation returns and policy entropy (benchmarks/benchmarl/transport_curves.py).
set -u
cd "$(dirname "$0")/../.."
FRAMES=${FRAMES:-240000}
SEEDS=${SEEDS:-0 1}
LIMIT=${LIMIT:-480}
OUT=${OUT:-/tmp/transport_sweep_out}
RUNS=${RUNS:-/tmp/transport_sweep}
PYTHON=${PYTHON:-$(command -v python3 || command -v python)}
mkdir -p "$OUT" "$RUNS"
if [ -d benchmarks/gpu/wheels ] && ! "$PYTHON" -c "import torchrl, vmas, jsonargparse" 2>/dev/null; then
  SITE=/tmp/transport-sweep-site
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" benchmarks/gpu/wheels/*.whl
  export PYTHONPATH=$SITE
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=
RECIPE=recipes/vmas_transport.yaml
# Every variant sets all of these (so the recipe's own algorithm and policy do not matter):
# BenchMARL's MAPPO update (15 passes of minibatch 400 at lr 1.5e-4 here, see docs/vmas.md) and
# 256x256 MLPs with a centralized critic, then the change named.
policy() { echo "--model.policy_bindings=[{\"id\":\"main\",\"class_path\":\"lightmarl.policies.MLPActorCritic\",\"policy_kwargs\":{\"hidden_sizes\":[256,256],\"critic\":\"centralized\"$1}}]"; }
algo() {  # entropy_coeff normalize_advantage epochs minibatch_size lr
  local a=--model.algorithm.init_args
  echo "$a.entropy_coeff=$1 $a.normalize_advantage=$2 $a.epochs=$3 $a.minibatch_size=$4 $a.lr=$5 $a.max_grad_norm=5.0"
}
# name|overrides (no spaces inside one override)
VARIANTS=(
  "no_adv_norm|$(algo 0.0 false 15 400 0.00015) $(policy '')"
  "adv_norm|$(algo 0.0 true 15 400 0.00015) $(policy '')"
  "min_std_0.4|$(algo 0.0 true 15 400 0.00015) $(policy ',"min_action_std":0.4')"
  "entropy_0.03|$(algo 0.03 true 15 400 0.00015) $(policy '')"
  "learned_std|$(algo 0.0 true 15 400 0.00015) $(policy ',"action_std":"learned"')"
  "learned_std_no_adv_norm|$(algo 0.0 false 15 400 0.00015) $(policy ',"action_std":"learned"')"
  "epochs_4|$(algo 0.0 true 4 1500 0.0003) $(policy '')"
)
for seed in $SEEDS; do
  for variant in "${VARIANTS[@]}"; do
    name=${variant%%|*}
    read -r -a overrides <<<"${variant#*|}"
    dir=$RUNS/${name}_seed$seed
    rm -rf "$dir"; mkdir -p "$dir"
    timeout "$LIMIT" "$PYTHON" -c "import sys; from lightmarl.cli import main; sys.argv[0] = 'lightmarl'; main()" fit \
      --config "$RECIPE" --seed_everything="$seed" --model.max_frames="$FRAMES" \
      --trainer.enable_checkpointing=false --trainer.default_root_dir="$dir" "${overrides[@]}" >"$dir/log.txt" 2>&1 &
  done
done
wait
tar czf "$OUT/transport_sweep.tar.gz" -C "$RUNS" .
"$PYTHON" benchmarks/benchmarl/transport_curves.py "$RUNS"/*
