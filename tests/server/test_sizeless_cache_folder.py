"""A cache folder set by hand on a file system that reports no size (statvfs 0 blocks: /proc, /sys) is refused at
start, naming the flag and the folder, with the exit status of any bad flag. Before, `strata serve` started: the
level's mkdir under /proc failed (the level said unavailable, the stop kept nothing) and under /sys/fs/cgroup, as
root, it made a cgroup whose free space read 0 bytes. `strata setup` refuses such folders (5f43ab8).

A live `strata serve` subprocess (it stops before the model loads), and validate() for each folder flag."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from strata.server.config import ConfigError, load_config, validate

from strata.exit_status import CONFIGURATION_REFUSED

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc") or shutil.disk_usage("/proc").total != 0,
                                reason="needs /proc, a file system that reports no size")

SIZELESS = "/proc/strata-cache-test"     # never made: a mkdir there fails


def test_serve_refuses_a_cold_folder_under_proc(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "STRATA_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--model", str(tmp_path / "none.gguf"),
         "--conversation-cache-cold-dir", SIZELESS, "--conversation-cache-cold-mib", "64"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    # before: it went on to load the model (here: 'not found', status 3), the folder never said
    assert done.returncode == CONFIGURATION_REFUSED, (done.returncode, done.stderr)
    assert (f"strata serve: --conversation-cache-cold-dir {SIZELESS}: on a file system that reports no size"
            in done.stderr), done.stderr
    assert "choose a folder on a disk" in done.stderr


@pytest.mark.parametrize("flag,budget", [
    ("conversation_cache_warm_dir", "conversation_cache_warm_mib"),
    ("conversation_cache_segment_dir", "conversation_cache_segment_mib"),
    ("conversation_cache_system_prompt_dir", "conversation_cache_system_prompt_mib"),
    ("conversation_cache_sessions_dir", None),
])
def test_every_cache_folder_flag_is_checked(tmp_path, flag, budget):
    values = {"conversation_cache_cold_dir": str(tmp_path / "cold"), "conversation_cache_cold_mib": 64,
              flag: SIZELESS + "/" + flag, **({budget: 64} if budget else {})}
    with pytest.raises(ConfigError) as e:
        validate(load_config(values, environ={}))
    assert f"--{flag.replace('_', '-')} {SIZELESS}/{flag}: on a file system that reports no size" in str(e.value)


def test_a_store_that_is_off_is_not_checked_and_a_disk_folder_passes(tmp_path):
    validate(load_config({"conversation_cache_warm_dir": SIZELESS, "conversation_cache_warm_mib": 0,
                          "conversation_cache_cold_dir": str(tmp_path / "a" / "b"), "conversation_cache_cold_mib": 64,
                          "conversation_cache_sessions_dir": str(tmp_path / "sessions")}, environ={}))
