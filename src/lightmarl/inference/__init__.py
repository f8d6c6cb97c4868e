"""A trained population as an artifact: read from any saved form, acting in PettingZoo's own loop, exported.

:func:`load_population` (also ``lightmarl.load_population``) reads a run directory, a checkpoint,
an export or a league snapshot and returns a :class:`Population` that acts on PettingZoo dicts;
:mod:`~lightmarl.inference.artifact` reads and writes the export format;
:mod:`~lightmarl.inference.onnx` writes each binding's acting graph as ONNX (``lightmarl export --format onnx``).
"""

from lightmarl.inference.allowed import resolve_allowed_class
from lightmarl.inference.artifact import Artifact, Snapshot, read_artifact, write_artifact
from lightmarl.inference.population import Population, load_population

__all__ = [
    "Artifact",
    "Population",
    "Snapshot",
    "load_population",
    "read_artifact",
    "resolve_allowed_class",
    "write_artifact",
]
