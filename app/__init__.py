"""strata.app: the desktop app (`strata-app`): first-run wizard, server supervisor, tray, monitor window.

`restart_policy.py` (pure) and `supervisor.py` are Qt-free; `controller.py`, `tray.py` and
`single_instance.py` are the Qt side; `main.py` is the entry point. See docs/app.md.
"""
