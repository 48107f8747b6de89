"""Entry script of the packaged `strata` command (PyInstaller): the console executable beside the app's,
so that `strata serve` typed in cmd.exe / PowerShell prints there and the shell waits for it (the app's
own executable is windowed on Windows: no console to print to)."""

import multiprocessing
import sys

from strata.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
