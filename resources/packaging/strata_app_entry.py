"""Entry script of the packaged app (PyInstaller): `strata-app`, and `strata-app --strata-cli ...`
for the server process the app starts."""

import multiprocessing
import sys

from strata.app.main import main

if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
