"""A test run keeps out of its user's folders: Strata's default config, cache, log and model folders (strata/folders.py)
lie in the run's temporary home (tests/conftest.py), in the tests' process and in the servers and apps they start."""

import subprocess
import sys
from pathlib import Path

from strata import folders
from tests.conftest import _TEST_HOME

_PRINT_FOLDERS = ("from strata import folders; "
                  "print(folders.config_dir(), folders.cache_dir(), folders.log_dir(), folders.models_dir())")


def test_default_folders_are_in_the_runs_temporary_home():
    here = [folders.config_dir(), folders.cache_dir(), folders.log_dir(), folders.models_dir()]
    child = subprocess.run([sys.executable, "-c", _PRINT_FOLDERS], capture_output=True, text=True, check=True)
    started = [Path(p) for p in child.stdout.split()]
    assert len(started) == 4
    for folder in here + started:
        assert folder.is_relative_to(_TEST_HOME), f"{folder} is outside the run's temporary home {_TEST_HOME}"
