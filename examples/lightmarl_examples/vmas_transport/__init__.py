"""VMAS ``transport``: VMAS's own scripted pusher as a lightmarl policy (a teacher, a partner, a baseline)."""

from lightmarl_examples.vmas_transport.scripted import TransportHeuristicPolicy

__all__ = ["TransportHeuristicPolicy"]
