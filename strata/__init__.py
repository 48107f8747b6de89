"""Strata: a local language-model server for coding agents.

The package root only carries the version; the parts live in strata.engine, strata.server,
strata.installer, strata.monitor and strata.app.
"""

__version__ = "0.1.0"
