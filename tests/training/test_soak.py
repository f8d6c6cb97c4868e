"""Memory over a long run : ``MemoryMonitor`` reads what it claims, and the mixed soak
recipe (PPO + DQN + a frozen NPC, validation with a GIF every epoch) stays flat after warm-up (slow)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lightmarl.training.memory import descendants, memory_metrics, rss_bytes

ROOT = Path(__file__).resolve().parents[2]


def test_memory_metrics_see_this_process_and_its_children():
    before = memory_metrics()
    assert before["memory/rss_mb"] > 10 and before["memory/peak_rss_mb"] >= before["memory/rss_mb"] - 1
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while (rss_bytes(child.pid) or 0) < 64 << 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert child.pid in descendants()
        assert memory_metrics()["memory/children_rss_mb"] >= 64
    finally:
        child.kill()
        child.wait()
    # Growth of this process shows in rss_mb and peak_rss_mb.
    ballast = bytearray(128 << 20)
    grown = memory_metrics()
    assert grown["memory/rss_mb"] - before["memory/rss_mb"] > 100 and grown["memory/peak_rss_mb"] > 100
    del ballast


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_mixed_soak_recipe_keeps_memory_flat_after_warm_up(tmp_path):
    """300 iterations (120k frames, 30 validations with a GIF each): the replay buffer is full after 13."""
    warmup, iterations = 50, 300
    (tmp_path / "assets").symlink_to(ROOT / "assets")
    run = subprocess.run(
        [str(Path(sys.executable).with_name("lightmarl")), "fit", "--config", str(ROOT / "recipes/soak_mixed.yaml"),
         f"--model.max_frames={iterations * 400}", "--trainer.enable_progress_bar=false"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=1700,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    (metrics,) = tmp_path.rglob("metrics.csv")
    rows = [r for r in csv.DictReader(metrics.open()) if r.get("memory/rss_mb")]
    assert len(rows) == iterations
    rss = {int(float(r["counters/iterations"])): float(r["memory/rss_mb"]) for r in rows}
    peak = {int(float(r["counters/iterations"])): float(r["memory/peak_rss_mb"]) for r in rows}
    # RSS dips at validation iterations (every 10th): the baseline is the most over two epochs after warm-up.
    baseline = max(rss[i] for i in range(warmup, warmup + 20))
    growth = max(rss[i] for i in range(warmup, iterations + 1)) - baseline
    assert growth < 10, f"RSS grew {growth:.1f} MB after warm-up"
    assert peak[iterations] - peak[warmup] < 10, f"peak RSS grew {peak[iterations] - peak[warmup]:.1f} MB"
    assert len(list(tmp_path.rglob("eval_iter*.gif"))) == iterations // 10  # the videos were written
