"""The monitor's widgets (PySide6 + pyqtgraph). Each takes the theme and draws a `MonitorView` in
`refresh(view)`; none fetches data or keeps global state."""
