"""A cache file this server may not read (chmod 000; more often a server run once as another user, with sudo,
leaving files of that user's) is not damage: its bytes are whole, so it is skipped and counted as `unreadable`
and nothing of it is removed. Session 39's cache trial: an unreadable sidecar was `damaged`, and the image its
sidecar vouched for was removed with it (`removed (image: files Strata wrote, damaged or orphaned)`); an
unreadable image was indexed, then deleted as damaged at its restore. Both histories lost for good where fixing
the permissions would have brought them back. Root reads any file, so as root the child runs as nobody."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_child(folder: str, *more: str) -> dict:
    cmd = [sys.executable, "-m", "tests.cache.unreadable_files_child", folder, *more]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: no other user to read the files as")
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        # a checkout or interpreter under a folder only root may enter (a CI's /root) cannot run as nobody at all
        probe = subprocess.run([*as_nobody, sys.executable, "-c", "import tests.cache.unreadable_files_child"],
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
        if probe.returncode != 0:
            pytest.skip(f"running as root, and nobody cannot run this checkout's Python: {probe.stderr.strip()[-200:]}")
        os.chown(os.path.dirname(folder), 65534, 65534)
        cmd = [*as_nobody, *cmd]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_unreadable_files_are_skipped_kept_and_not_called_damaged():
    base = tempfile.mkdtemp(prefix="strata-unreadable-")   # not under root's 0700 pytest folder: nobody reads it
    try:
        os.chmod(base, 0o755)
        got = run_child(os.path.join(base, "cold"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    keys = got["keys"]
    assert got["entries"] == [keys["whole"]], got
    assert got["skipped"] == {"unreadable": 2} and got["removed"] == {} and got["damaged"] == 0, got
    for key in (keys["sidecar_unreadable"], keys["image_unreadable"]):   # both files of each left as they were
        assert f"strata-conv-{key}.json" in got["files"] and f"strata-conv-{key}.img" in got["files"], got["files"]
    assert 'strata_cache_skipped_files_total{level="cold",reason="unreadable"} 2' in got["metrics"], got["metrics"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_an_image_made_unreadable_while_serving_is_a_miss_not_damage():
    """After the index: the restore could not open the image (Permission denied), counted it damaged and deleted
    the entry's files."""
    base = tempfile.mkdtemp(prefix="strata-unreadable-")
    try:
        os.chmod(base, 0o755)
        got = run_child(os.path.join(base, "cold"), "--while-serving")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert got["hit"] and got["restored"] == 0 and got["damaged"] == 0 and got["indexed"] == [], got
    assert len([f for f in got["files"] if f.endswith(".img")]) == 3, got["files"]   # nothing deleted
