"""strata.engine: the Python façade over the native engine strata._engine."""

from strata import _engine

build_info = _engine.build_info

__all__ = ["build_info"]
