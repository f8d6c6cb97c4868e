"""Errors lightmarl reports to users."""

from __future__ import annotations


class ConfigError(ValueError):
    """A recipe cannot run as written; raised before training starts, naming the field and value."""
