"""Guarded reads of a memory map whose file another process truncated (mapped-read-guard.h): the native
CRC, read_mapped and Engine.kv_write_checked raise MappedReadFault (an OSError) where an unguarded read
dies of SIGBUS, the context is left as it was, and a SIGBUS outside the guarded reads still reaches the
previous handler (faulthandler, then death). Each case runs in a child process: a guard that failed
would kill it, not pytest. Not here: the cache's handling of it (tests/cache/test_truncated_during_restore.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Windows refuses to truncate a mapped file")

PRELUDE = """
import faulthandler, mmap, os, sys, tempfile
from strata._engine import MappedReadFault, crc32, read_mapped
fd, path = tempfile.mkstemp()
os.write(fd, bytes(range(256)) * 256)  # 64 KiB
mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
os.truncate(path, 4096)  # another process cuts the file: pages past the first are gone
view = memoryview(mm)
"""


def run_child(body: str, *args: str) -> subprocess.CompletedProcess:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_crc32_and_read_mapped_of_gone_pages_raise_and_the_process_lives():
    run = run_child("""
        assert crc32(view[:4096]) == crc32(bytes(range(256)) * 16)  # the page still there reads
        for read in (lambda: crc32(view), lambda: crc32(view[8192:9000]), lambda: read_mapped(view[4000:5000])):
            try:
                read()
            except MappedReadFault as exc:
                assert isinstance(exc, OSError) and "cut short while read" in str(exc), exc
            else:
                raise AssertionError("a read of a truncated page returned")
        assert read_mapped(view[:16]) == bytes(range(16))
        print("alive")
    """)
    assert run.returncode != -signal.SIGBUS, "a guarded read died of SIGBUS"
    assert run.returncode == 0 and run.stdout.strip() == "alive", run.stderr[-3000:]


def test_kv_write_checked_of_a_truncated_chunk_raises_and_leaves_the_context(tiny_model_factory):
    run = run_child("""
        import zlib
        from strata.engine import Engine
        engine = Engine(sys.argv[1], n_ctx=256, n_slots=1, n_threads=1)
        tokens = list(range(3, 43))
        engine.prefill(0, tokens)
        kv = engine.kv_read(0, 0, 40)
        assert len(kv) > 2 * 4096, len(kv)
        fd2, path2 = tempfile.mkstemp()
        os.write(fd2, kv)
        mm2 = mmap.mmap(fd2, 0, access=mmap.ACCESS_READ)
        engine.truncate(1, 0)
        assert engine.kv_write_checked(1, tokens[:8], memoryview(mm2)[:len(kv) // 5], 0) is False  # wrong CRC
        os.truncate(path2, 4096)
        try:
            engine.kv_write_checked(1, tokens, memoryview(mm2), zlib.crc32(kv))
        except MappedReadFault:
            pass
        else:
            raise AssertionError("a chunk cut short was written")
        assert engine.context_tokens(1) == [], engine.context_tokens(1)
        engine.prefill(1, tokens)  # the engine's lock was not left held
        assert engine.context_tokens(1) == tokens
        print("alive")
    """, str(tiny_model_factory(n_layer=8, n_head_kv=4)))
    assert run.returncode != -signal.SIGBUS, "kv_write_checked died of SIGBUS"
    assert run.returncode == 0 and run.stdout.strip() == "alive", run.stderr[-3000:]


@pytest.mark.parametrize("faulthandler_first", [True, False], ids=["faulthandler_first", "guard_first"])
def test_a_sigbus_outside_the_guard_still_reaches_faulthandler_and_kills(faulthandler_first):
    run = run_child(f"""
        if {faulthandler_first}:
            faulthandler.enable()
        read_mapped(view[:8])  # installs the guard's handler
        faulthandler.enable()  # again after it (a server enabling it late): the guard goes back on top
        try:
            read_mapped(view[8192:8200])
        except MappedReadFault:
            print("guarded", flush=True)
        bytes(view[8192:8200])  # Python's own read of a gone page: not guarded
        print("survived an unguarded SIGBUS", flush=True)
    """)
    assert run.stdout.strip() == "guarded", (run.stdout, run.stderr[-3000:])
    assert run.returncode == -signal.SIGBUS, (run.returncode, run.stderr[-3000:])
    assert run.stderr.count("Fatal Python error: Bus error") == 1, run.stderr[-3000:]
