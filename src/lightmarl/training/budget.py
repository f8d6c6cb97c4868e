"""The training budget in frames: how many iterations a run takes, and what a resume with another shape may do.

``model.max_frames`` counts env steps summed over env copies and processes. An iteration is one
rollout of ``env.num_envs x model.rollout_steps`` env steps per process, so its frames depend on the
world size too. The frames done come from a resumed run's checkpoint: a run resumed with more env
copies, a longer rollout or more processes neither trains past ``max_frames`` nor stops short of it
(`FrameBudget.check_resume`), and says which it would have to do instead.

Examples:
    >>> budget = FrameBudget(max_frames=150, num_envs=3, rollout_steps=10)
    >>> budget.frames_per_iteration, budget.remaining_iterations(frames=60)
    (30, 3)
    >>> budget.total_iterations(frames=60, iterations=2), budget.fraction_done(frames=60, iterations=2)
    (5, 0.4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from lightmarl.errors import ConfigError


@dataclass(frozen=True)
class FrameBudget:
    """A run's frame budget and the shape of its iterations.

    Attributes:
        max_frames: training budget in env steps summed over env copies and processes.
        num_envs: env copies each process steps.
        rollout_steps: env steps per env copy per iteration.
        iterations_per_epoch: iterations per Lightning epoch.
        world_size: processes of the run (each steps ``num_envs`` env copies).
    """

    max_frames: int
    num_envs: int
    rollout_steps: int
    iterations_per_epoch: int = 10
    world_size: int = 1

    def __post_init__(self) -> None:
        for name, value in (
            ("model.rollout_steps", self.rollout_steps),
            ("model.max_frames", self.max_frames),
            ("model.iterations_per_epoch", self.iterations_per_epoch),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")

    @property
    def frames_per_iteration(self) -> int:
        """Env steps per iteration, summed over the processes."""
        return self.num_envs * self.rollout_steps * self.world_size

    def remaining_iterations(self, frames: int) -> int:
        """Iterations left until ``max_frames`` after ``frames`` done."""
        return max(0, math.ceil((self.max_frames - frames) / self.frames_per_iteration))

    def total_iterations(self, frames: int, iterations: int) -> int:
        """Iterations of the whole run: the ``iterations`` done (``frames`` in all) and those left."""
        return iterations + self.remaining_iterations(frames)

    def fraction_done(self, frames: int, iterations: int) -> float:
        """The share of the run's iterations done (what learning-rate and loss schedules follow)."""
        return iterations / self.total_iterations(frames, iterations)

    def iteration_shape(self) -> dict[str, int]:
        """What an iteration is made of, as a checkpoint records it (the recipe's field names)."""
        return {"env.num_envs": self.num_envs, "model.rollout_steps": self.rollout_steps, "world size": self.world_size}

    def check_resume(self, saved_shape: Any, *, frames: int, iterations: int) -> None:
        """Continue a resumed run (on this budget's ``world_size`` processes) to exactly ``max_frames`` or refuse it.

        Args:
            saved_shape: the checkpoint's `iteration_shape` (``None`` for a checkpoint without one).
            frames: frames the checkpoint's run had done.
            iterations: iterations the checkpoint's run had done.

        Raises:
            ConfigError: the frames left are no whole number of the resumed run's iterations; the
                message names what changed and the ``max_frames`` values that would fit.
        """
        now = self.iteration_shape()
        fpi = self.frames_per_iteration
        if isinstance(saved_shape, dict):
            changed = [
                f"{k} {saved_shape[k]} -> {now[k]}" for k in now if k in saved_shape and saved_shape[k] != now[k]
            ]
        elif iterations > 0 and frames != iterations * fpi:  # a checkpoint without the shape
            changed = [f"frames per iteration {frames // iterations} -> {fpi}"]
        else:
            changed = []
        left = self.max_frames - frames
        if not changed or left <= 0:
            return
        if left % fpi == 0:
            rank_zero_info(
                f"lightmarl: resuming with {', '.join(changed)}: {left // fpi} iterations of {fpi} frames "
                f"reach model.max_frames {self.max_frames} exactly"
            )
            return
        below, above = frames + left // fpi * fpi, frames + -(-left // fpi) * fpi
        options = " or ".join(str(n) for n in dict.fromkeys(n for n in (below, above) if n > frames))
        raise ConfigError(
            f"--ckpt_path: the run is resumed with {', '.join(changed)}; the {frames} frames done leave {left} "
            f"of model.max_frames {self.max_frames}, not a whole number of iterations of {fpi} frames. Resume "
            f"with the settings the checkpoint was written with, or set model.max_frames to {options}"
        )

    def reached(self, frames: int) -> bool:
        """Whether ``frames`` done already reach ``max_frames`` (a finished run resumed), saying so on rank 0."""
        if frames < self.max_frames:
            return False
        rank_zero_info(
            f"lightmarl: the run had already reached model.max_frames ({frames} frames); nothing to train "
            "(raise model.max_frames to continue it)"
        )
        return True

    def start_fit(self, trainer: Any, frames: int) -> None:
        """At the start of ``fit`` after ``frames`` done: stop a finished run resumed, else show the budget in the progress bar."""
        if self.reached(frames):
            # No iteration would run, so no training step would ever stop the (max_epochs: -1) fit
            # loop, which would spin on empty epochs.
            trainer.should_stop = True
        else:
            self.show_in_progress_bar(trainer, frames)

    def show_in_progress_bar(self, trainer: Any, frames: int) -> None:
        """Give the progress bar the budget's epochs and iterations instead of ``-2`` and ``--``.

        The frame budget, not an epoch count, ends training (``max_epochs: -1``) and the tick loader
        has no length, so Lightning's bar reads ``Epoch 3/-2 ... 60/--``. The epochs the budget
        still needs and ``iterations_per_epoch`` are what the run will do: stating them to the fit
        loop changes no stopping point (the last tick ends the last epoch either way). A resumed run
        keeps ``--`` for the iterations: with a known epoch length Lightning would warn that a
        manual-optimization run's step count does not fall on an epoch boundary.

        Args:
            trainer: the Lightning ``Trainer`` at the start of ``fit``.
            frames: frames done (a resumed run's come from its checkpoint).
        """
        loop = trainer.fit_loop
        if loop.max_epochs is None or loop.max_epochs < 0:
            loop.max_epochs = trainer.current_epoch + math.ceil(
                self.remaining_iterations(frames) / self.iterations_per_epoch
            )
        if loop.max_batches == float("inf") and trainer.ckpt_path is None:
            loop.max_batches = self.iterations_per_epoch
