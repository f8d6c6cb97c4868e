"""mpe2 ``simple_spread``: scripted policies that read its observation layout."""

from lightmarl_examples.simple_spread.scripted import SpreadByAssignmentPolicy, SpreadToLandmarkPolicy

__all__ = ["SpreadByAssignmentPolicy", "SpreadToLandmarkPolicy"]
