#!/usr/bin/env bash
# Every GPU measurement of benchmarks/README.md ("GPU") in one run of about 6 minutes, each part
# time-limited, for a machine lent with one GPU for a short while. Run from the repository root:
#
#   bash benchmarks/gpu/run_all.sh            # results under $OUT (default benchmarks/results/gpu)
#   DEVICE=cpu SMALL=1 bash benchmarks/gpu/run_all.sh   # the same steps, tiny, on CPU (a dry run)
#   PARTS="vmas_table profile" bash benchmarks/gpu/run_all.sh  # only some parts (names as in summary.txt)
#   FIT=0 bash benchmarks/gpu/run_all.sh    # the VMAS table without its whole-`fit` rows (saves ~1 min)
#
# The GPU machine has its own Python with a CUDA torch but no project venv and maybe no package
# index: the script installs the other dependencies (never torch) from benchmarks/gpu/wheels
# (filled on a machine with an index by benchmarks/gpu/download_wheels.sh; git-ignored) into a
# folder of their own on PYTHONPATH, falling back to the index for what is missing.
# Results: one result JSON per part (benchmarks/results.py's format, named with $TAG, the GPU's
# model, e.g. vmas_speed_h200.json: copy one to benchmarks/results/ and render it into the docs
# with scripts/render_results.py) and a log of each part, all packed into $OUT/results.tar.gz after every
# part (the device runner returns only a few files), and $OUT/summary.txt (each part's rc and time).
set -u
cd "$(dirname "$0")/../.."
REPO=$PWD
FINAL=${OUT:-$REPO/benchmarks/results/gpu}
OUT=${WORK:-/tmp/lightmarl-gpu-results}  # every file of the run; packed into $FINAL/results.tar.gz
mkdir -p "$FINAL"
DEVICE=${DEVICE:-cuda}
SMALL=${SMALL:-0}
rm -rf "$OUT"; mkdir -p "$OUT"  # a rerun on a warm machine starts clean
# The commit the results name (results.write_result reads it where this copy has no .git).
export LIGHTMARL_COMMIT=$(git rev-parse HEAD 2>/dev/null || cat benchmarks/gpu/COMMIT 2>/dev/null || true)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$SUMMARY"; cp "$SUMMARY" "$FINAL/summary.txt"; }
pack() { tar czf "$FINAL/results.tar.gz" -C "$OUT" . 2>/dev/null; }

# --- environment ---------------------------------------------------------------------------
PYTHON=${PYTHON:-$(command -v python3 || command -v python)}
if [ "$DEVICE" = cuda ] || [ -n "${INSTALL:-}" ]; then
  # Installed into a folder of their own (--target) put first on PYTHONPATH: the machine's Python,
  # with its CUDA torch, stays as it is, whether it is a system, venv or conda one.
  SITE=${SITE:-/tmp/lightmarl-gpu-site}
  WHEELS=${WHEELS:-$REPO/benchmarks/gpu/wheels}
  mkdir -p "$SITE/bin"
  # What lightmarl, vmas, the benchmarks and the host-sync test import; --no-deps: never a second torch.
  REQS=(torchrl==0.14.1 tensordict==0.14.3 "lightning>=2.6,<2.7" "pytorch-lightning>=2.6,<2.7" lightning-utilities
        torchmetrics "jsonargparse[signatures]>=4.40" docstring_parser typeshed_client "pettingzoo>=1.25,<2" gymnasium
        Farama-Notifications cloudpickle "mpe2>=1.1" pygame-ce imageio pillow safetensors openskill matplotlib
        contourpy cycler fonttools kiwisolver pyparsing python-dateutil six jsonschema jsonschema-specifications
        referencing rpds-py attrs orjson pyvers importlib_metadata zipp packaging PyYAML tqdm fsspec typing_extensions
        "vmas==1.5.2" "pyglet<=1.5.27" gym==0.26.2 gym-notices pytest pytest-timeout iniconfig pluggy pygments
        hypothesis sortedcontainers)
  START=$(date +%s)
  # Only what this Python lacks (or holds at another version): the machine's own packages stay, and
  # the wheel folder need hold just those (the GPU image has lightning, matplotlib, pytest, ...).
  read -r -a REQS <<<"$("$PYTHON" - "${REQS[@]}" <<'PY'
import sys
from importlib import metadata
from packaging.requirements import Requirement
missing = []
for text in sys.argv[1:]:
    req = Requirement(text)
    try:
        if req.specifier.contains(metadata.version(req.name), prereleases=True):
            continue
    except metadata.PackageNotFoundError:
        pass
    missing.append(text)
print(" ".join(missing))
PY
)"
  note "to install: ${REQS[*]:-nothing}"
  # One pip call for everything (a call per package costs seconds each); one by one, with the
  # package index as a fallback, only if it fails.
  if [ ${#REQS[@]} -gt 0 ] && ! timeout 180 "$PYTHON" -m pip install --quiet --no-deps --no-index --find-links "$WHEELS" --target "$SITE" \
      "${REQS[@]}" >>"$OUT/install.log" 2>&1; then
    for req in "${REQS[@]}"; do
      timeout 60 "$PYTHON" -m pip install --quiet --no-deps --no-index --find-links "$WHEELS" --target "$SITE" "$req" \
        >>"$OUT/install.log" 2>&1 \
        || timeout 60 "$PYTHON" -m pip install --quiet --no-deps --target "$SITE" "$req" >>"$OUT/install.log" 2>&1 \
        || note "could not install $req"
    done
  fi
  "$PYTHON" -c "import numpy" 2>/dev/null \
    || timeout 60 "$PYTHON" -m pip install --quiet --target "$SITE" numpy >>"$OUT/install.log" 2>&1 \
    || note "numpy missing and not installable"
  # The lightmarl console script, running this checkout's sources (no build step).
  printf '#!%s\nimport sys\nfrom lightmarl.cli import main\nsys.exit(main())\n' "$PYTHON" > "$SITE/bin/lightmarl"
  chmod +x "$SITE/bin/lightmarl"
  note "install: $(( $(date +%s) - START )) s into $SITE for $PYTHON"
  PY=$PYTHON
  export PYTHONPATH=$REPO/src:$REPO/benchmarks:$SITE
  export PATH=$SITE/bin:$PATH
else
  PY=${PY:-$PYTHON}
  export PYTHONPATH=$REPO/src:$REPO/benchmarks
  export PATH=$(dirname "$PY"):$PATH
fi
"$PY" - <<'PY' 2>&1 | tee -a "$SUMMARY"
import os, torch, torchrl, tensordict, lightning, vmas, lightmarl
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(0),
      "| torchrl", torchrl.__version__, "tensordict", tensordict.__version__, "lightning", lightning.__version__,
      "| cores", os.cpu_count())
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$SUMMARY" 2>/dev/null
# Hardware threads per core: env workers stepping in lockstep go at the pace of two sharing a core.
lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)):' >>"$SUMMARY"
# Part of every result's name: the GPU's model ("NVIDIA H200" -> h200), or the device on a dry run.
if [ -z "${TAG:-}" ] && [ "$DEVICE" = cuda ]; then
  TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | awk '{print tolower($NF)}' | tr -cd 'a-z0-9_-')
fi
TAG=${TAG:-$DEVICE}
[ -n "${INSTALL_ONLY:-}" ] && exit 0

part() {  # part NAME SECONDS COMMAND...: run one part under a time limit, log to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  if [ -n "${PARTS:-}" ] && [[ " $PARTS " != *" $name "* ]]; then return; fi  # PARTS="profile ...": only those
  local start=$(date +%s)
  timeout --signal=INT --kill-after=20 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  note "$name: rc $rc in $(( $(date +%s) - start )) s (limit $limit s)"
  pack
}

if [ "$SMALL" = 1 ]; then
  ENVS=(64 256); SECONDS_PER=0.5; REPEATS=1; FIT_IT=2; NAV_ENVS=256; NAV_MB=2048; CAP=60; WORKERS=(1 2); WENVS=16; WSEC=1
else
  ENVS=(1024 4096 16384); SECONDS_PER=1.5; REPEATS=2; FIT_IT=3; NAV_ENVS=4096; NAV_MB=16384; CAP=90; WORKERS=(1 2 4 8 "$(nproc)"); WENVS=256; WSEC=2
fi

# (a) the VMAS table on the device: raw loop (batched reset) vs VmasVecEnv vs collector vs fit.
FIT_ARGS=(--fit --fit-iterations "$FIT_IT" --fit-timeout 60)
[ "${FIT:-1}" = 0 ] && FIT_ARGS=()
part vmas_table 150 "$PY" benchmarks/vmas_speed.py --device "$DEVICE" --num-envs "${ENVS[@]}" --seconds "$SECONDS_PER" \
  --repeats "$REPEATS" "${FIT_ARGS[@]}" --json "$OUT/vmas_speed_$TAG.json"

# (b) no host synchronisation on the collector's step path (torch.cuda.set_sync_debug_mode("error")).
part host_sync 50 "$PY" -m pytest -q -p no:cacheprovider -m "gpu or not slow" tests/data/test_host_sync.py \
  --junitxml "$OUT/host_sync_junit.xml"

# (e) where a rollout's time goes on the device: step loop, per-rollout assembly, buffers, cProfile.
part profile 60 "$PY" benchmarks/gpu/profile_collector.py --device "$DEVICE" --num-envs "${ENVS[-1]}" \
  --json "$OUT/profile_collector_$TAG.json"

# (c) the GPU-sized recipe to a fixed training return: on the GPU, then the same recipe on every CPU core.
TARGET=${TARGET:-0.6}
part recipe_gpu $((CAP + 40)) "$PY" benchmarks/time_to_return.py --recipe recipes/vmas_navigation_gpu.yaml \
  --accelerator "$([ "$DEVICE" = cuda ] && echo gpu || echo cpu)" --target "$TARGET" --max-seconds "$CAP" \
  --json "$OUT/time_to_return_navigation_gpu_$TAG.json" -- --model.env.device="$DEVICE" --model.env.num_envs="$NAV_ENVS" \
  --model.algorithm.init_args.minibatch_size="$NAV_MB"
# (no 409,600-frame iteration of it finished in 140 s on the 16 cores of the first GPU machine:
# the CPU run is capped shorter, its lower bound is what it measures)
part recipe_cpu $((CAP + 10)) "$PY" benchmarks/time_to_return.py --recipe recipes/vmas_navigation_gpu.yaml \
  --accelerator cpu --target "$TARGET" --max-seconds $((CAP * 2 / 3)) --json "$OUT/time_to_return_navigation_gpu_${TAG}_cpu.json" -- \
  --model.env.device=cpu --model.env.num_envs="$NAV_ENVS" --model.algorithm.init_args.minibatch_size="$NAV_MB"

# (d) env worker processes at 1, 2, 4, 8 and every core, env-bound PettingZoo collection: placed by the
# scheduler, pinned one per physical core first, and the raw env loop over as many processes (the ceiling).
# WORKER_COUNTS="1 4 8" and WORKER_FLAGS="--pin" shorten it where device time is short.
read -r -a WORKER_COUNTS <<<"${WORKER_COUNTS:-0 ${WORKERS[*]}}"
read -r -a WORKER_FLAGS <<<"${WORKER_FLAGS:---pin --raw}"
part worker_scaling 240 "$PY" benchmarks/worker_scaling.py --workers "${WORKER_COUNTS[@]}" --num-envs "$WENVS" \
  --seconds "$WSEC" --repeats 1 "${WORKER_FLAGS[@]}" --json "$OUT/worker_scaling_$TAG.json"

note "done; JSON in $FINAL/results.tar.gz: $(cd "$OUT" && ls *.json 2>/dev/null | tr '\n' ' ')"
pack
