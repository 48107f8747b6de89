"""strata.monitor: the live monitor of a Strata server.

`model.py` (Qt-free feed model), `client.py` (the SSE feed client), `units.py` (numbers with units),
`widgets/` and `window.py` (PySide6 + pyqtgraph), `cli.py` (`strata monitor`). See docs/app.md.
"""
