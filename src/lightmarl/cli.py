"""The ``lightmarl`` command: LightningCLI over :class:`~lightmarl.training.MARLModule`.

``lightmarl fit --config recipes/quickstart.yaml`` trains, ``lightmarl validate`` /
``lightmarl test`` play evaluation episodes; ``--print_config`` shows the resolved recipe
and any ``--model.x.y=value`` / ``--trainer.x=value`` overrides it.
"""

from __future__ import annotations

import sys

from jsonargparse import set_parsing_settings
from lightning.pytorch.cli import LightningCLI

from lightmarl.errors import ConfigError
from lightmarl.training.module import MARLModule

TRAINER_DEFAULTS = {
    # The frame budget (model.max_frames) ends training, not an epoch count.
    "max_epochs": -1,
    "log_every_n_steps": 1,
    "num_sanity_val_steps": 0,
    "accelerator": "auto",
    "devices": 1,
}


class LightmarlCLI(LightningCLI):
    """LightningCLI with lightmarl's defaults; see :data:`TRAINER_DEFAULTS`."""

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except (ValueError, TypeError) as err:
            raise ConfigError(str(err)) from err


def main(args: list[str] | None = None) -> None:
    # Algorithms declare their hyper-parameters as dataclass fields with docstrings: show those in --help.
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    try:
        LightmarlCLI(
            MARLModule,
            trainer_defaults=TRAINER_DEFAULTS,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            args=args,
        )
    except ConfigError as err:
        # Config errors raised while building the run: one readable line, non-zero exit.
        print(f"lightmarl: error: {err}", file=sys.stderr)  # noqa: T201
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover - use the installed `lightmarl` console script
    main()
