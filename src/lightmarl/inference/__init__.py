"""A trained population as an artifact: read from any saved form, acting in PettingZoo's own loop, exported.

[`load_population`][lightmarl.inference.population.load_population] (also ``lightmarl.load_population``) reads a run directory, a checkpoint,
an export or a league snapshot and returns a [`Population`][lightmarl.inference.population.Population] that acts on PettingZoo dicts;
[`artifact`][lightmarl.policies.artifact] (re-exported here: ``policy_uri`` reads the same files) reads and
writes the export format; class names in files follow the loading rule of [`lightmarl.trust`][lightmarl.trust];
`onnx` writes each binding's acting graph as ONNX (``lightmarl export --format onnx``).
"""

from lightmarl.inference.population import Population, load_population
from lightmarl.policies.artifact import SavedPopulation, Snapshot, read_artifact, write_artifact

__all__ = [
    "Population",
    "SavedPopulation",
    "Snapshot",
    "load_population",
    "read_artifact",
    "write_artifact",
]
