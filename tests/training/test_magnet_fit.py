"""PPO's ``magnet`` (magnetic mirror descent) through the real CLI: a bad setting is one error line,
and a short Kuhn self-play run with it on learns a policy far less exploitable than uniform play."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspiel")

from expectations import fit_in_process
from lightmarl.algorithms import MagnetLoss
from lightmarl.cli import main as cli_main
from lightmarl.training.exploitability import OpenSpielExploitability

ROOT = Path(__file__).resolve().parents[2]
UNIFORM_KUHN = 0.458


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("--model.algorithm.init_args.magnet.coeff=-1", "algorithm.magnet.coeff: invalid value -1.0"),
        ("--model.algorithm.init_args.magnet.mixing=0", "algorithm.magnet.mixing: invalid value 0.0"),
        ("--model.algorithm.init_args.magnet.update_every=0", "algorithm.magnet.update_every: invalid value 0"),
    ],
)
def test_a_bad_magnet_setting_in_the_recipe_is_one_error_line(capsys, override, message):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["fit", "--config", str(ROOT / "recipes/league_leduc_poker_mmd.yaml"), override])
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lightmarl: error:")]
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.timeout(300)
def test_a_short_kuhn_self_play_run_with_the_magnet_learns(tmp_path):
    # recipes/league_kuhn_poker_selfplay.yaml cut to 64 copies x 16 turns, 20 iterations (20,480 frames).
    module = fit_in_process(
        ROOT / "recipes" / "league_kuhn_poker_selfplay.yaml",
        tmp_path,
        "--model.env.num_envs=64",
        "--model.rollout_steps=16",
        "--model.max_frames=20480",
        "--model.algorithm.init_args.magnet={coeff: 0.05, mixing: 0.05}",
    )
    (callback,) = [c for c in module.trainer.callbacks if isinstance(c, OpenSpielExploitability)]
    (unit,) = module.marl_trainer.unit_trainers.values()
    magnet = unit.magnet
    assert isinstance(magnet, MagnetLoss) and magnet.magnet_updates == 20
    assert callback.last["league/main/exploitability"] < 0.6 * UNIFORM_KUHN, callback.last
