"""Two processes writing one key in one folder (two servers sharing a cache folder), and the
temporary files a writer leaves: each write has a temporary name of its own, the final entry is one
writer's whole image under its own sidecar, and start-up removes only the leftovers of writers that
stopped, never a live writer's file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import zlib

from strata.server.cache.disk import DiskLevel, Identity
from strata.server.cache.fileio import FileIO
from strata.server.cache.temp_files import ABANDONED_AFTER_S, HOST

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IDENTITY = Identity("m", "layout")
KEY = "0123456789abcdef0123456789abcdef"
PIECE = 64 << 10

WRITER = textwrap.dedent("""
    import os, sys, time
    from strata.server.cache.disk import DiskLevel, Identity
    from strata.server.cache.fileio import FileIO
    folder, writer, rounds, go, key = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]

    class PauseAfterFirstPiece(FileIO):
        # rounds == 0: write one piece, say so, wait until told to finish (a live writer mid-write)
        def write(self, f, data):
            super().write(f, data)
            if rounds == 0 and f.name.endswith(".tmp") and ".img." in f.name:
                f.flush()
                print("writing", flush=True)
                while not os.path.exists(go + ".finish"):
                    time.sleep(0.01)

    def payload(writer, r):
        # 5 pieces of 64 KiB + a tail, every byte a function of (writer, round): a mixed file shows
        return [bytes([writer * 16 + r % 16, i]) * (32 << 10) for i in range(5)] + [bytes([writer, r % 256]) * 100]

    lvl = DiskLevel("cold", folder, 0, 0.0, Identity("m", "layout"), io=PauseAfterFirstPiece(), piece_bytes=64 << 10)
    lvl.open()
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    failures = []
    for r in range(max(rounds, 1)):
        try:
            lvl.write(key, "conversation", list(range(writer, writer + 10 + r)), payload(writer, r), time.time(),
                      meta={"writer": writer, "round": r})
        except Exception as exc:
            failures.append(repr(exc))
    print("failures", len(failures), failures[:3], flush=True)
""")


def payload(writer: int, r: int) -> bytes:
    return b"".join([bytes([writer * 16 + r % 16, i]) * (32 << 10) for i in range(5)] + [bytes([writer, r % 256]) * 100])


def start_writer(folder, writer: int, rounds: int, go: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(writer), str(rounds), go, KEY], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def temp_files(folder) -> list[str]:
    return [n for n in os.listdir(folder) if n.endswith(".tmp")]


def test_two_processes_writing_one_key_each_write_whole_and_valid(tmp_path):
    folder = tmp_path / "cold"
    folder.mkdir()
    go = str(tmp_path / "go")
    procs = [start_writer(folder, w, 60, go) for w in (1, 2)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    open(go, "w").close()  # both start writing together
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "failures 0 " in out, out  # every write of both succeeded
    assert temp_files(folder) == []
    lvl = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, piece_bytes=PIECE)
    lvl.open()
    assert list(lvl.entries) == [KEY] and not lvl.skipped and not lvl.swept
    entry = lvl.entries[KEY]
    image = open(entry.image_path, "rb").read()
    # the image is exactly the one its sidecar names (writer, round, tokens, checksums): never a mix
    writer, r = entry.meta["writer"], entry.meta["round"]
    assert image == payload(writer, r)
    assert entry.tokens.tolist() == list(range(writer, writer + 10 + r))
    crcs = tuple(zlib.crc32(image[i:i + PIECE]) for i in range(0, len(image), PIECE))
    assert crcs == entry.piece_crc32 and entry.image_bytes == len(image)


def read_back(folder):
    lvl = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, piece_bytes=PIECE)
    lvl.open()
    assert list(lvl.entries) == [KEY] and not lvl.skipped
    return lvl.entries[KEY], open(lvl.entries[KEY].image_path, "rb").read()


def test_a_write_landing_between_anothers_image_and_sidecar_waits_for_it(tmp_path):
    # Writer A pauses between renaming its image and its sidecar into place; writer B (another level
    # object on the folder: another server) writes the same key then. B's pair goes in wholly after A's.
    folder = tmp_path / "cold"
    image_in_place = threading.Event()

    class SlowCommit(FileIO):
        def rename(self, src, dst):
            super().rename(src, dst)
            if dst.endswith(".img"):
                image_in_place.set()
                time.sleep(0.3)

    a = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, io=SlowCommit(), piece_bytes=PIECE)
    b = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, piece_bytes=PIECE)
    a.open()
    b.open()
    ta = threading.Thread(target=a.write, args=(KEY, "conversation", [1, 2], [payload(1, 0)], 1.0),
                          kwargs={"meta": {"writer": 1}})
    ta.start()
    assert image_in_place.wait(10)
    b.write(KEY, "conversation", [1, 2], [payload(2, 0)], 2.0, meta={"writer": 2})
    ta.join()
    entry, image = read_back(folder)
    assert entry.meta["writer"] == 2 and image == payload(2, 0)
    assert tuple(zlib.crc32(image[i:i + PIECE]) for i in range(0, len(image), PIECE)) == entry.piece_crc32
    assert temp_files(folder) == []


def test_start_up_keeps_a_live_writers_temporary_file(tmp_path):
    folder = tmp_path / "cold"
    folder.mkdir()
    go = str(tmp_path / "go")
    open(go, "w").close()
    p = start_writer(folder, 3, 0, go)   # writes one piece, then waits
    try:
        assert p.stdout.readline().strip() == "ready"
        assert p.stdout.readline().strip() == "writing"
        (live,) = temp_files(folder)
        other = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, piece_bytes=PIECE)
        other.open()  # a second server starting on the folder meanwhile
        assert temp_files(folder) == [live] and other.swept == []
        assert other.skipped["partial"] == 1 and f"pid {p.pid} may still be writing it" in other.skipped_files[0][2]
    finally:
        open(go + ".finish", "w").close()
    out, err = p.communicate(timeout=60)
    assert "failures 0 " in out, out + err
    assert temp_files(folder) == []
    again = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, piece_bytes=PIECE)
    again.open()
    assert list(again.entries) == [KEY] and open(again.entries[KEY].image_path, "rb").read() == payload(3, 0)


def test_start_up_removes_leftovers_of_stopped_writers_only(tmp_path):
    folder = tmp_path / "cold"
    folder.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    img = f"strata-conv-{KEY}.img"
    old = time.time() - ABANDONED_AFTER_S - 60
    names = {  # name -> (seconds since written, removed at start-up)
        f"{img}.{HOST}-{dead_pid}-aa.tmp": (0, True),             # its writer is gone
        f"{img}.{HOST}-{os.getpid()}-bb.tmp": (0, False),         # a live writer on this host
        f"{img}.{HOST}-{os.getpid()}-cc.tmp": (old, True),        # pid alive but reused: an hour untouched
        f"{img}.otherhost-{dead_pid}-dd.tmp": (0, False),         # another host's writer: cannot tell
        f"{img}.otherhost-{dead_pid}-ee.tmp": (old, True),
        f"{img}.tmp": (0, False),                                 # an older version's name
        f"strata-conv-{KEY[::-1]}.img.tmp": (old, True),
    }
    for n, (age, _) in names.items():
        path = folder / n
        path.write_bytes(b"x" * 10)
        if age:
            os.utime(path, (age, age))
    lvl = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, piece_bytes=PIECE)
    lvl.open()
    kept = sorted(n for n, (_, gone) in names.items() if not gone)
    assert sorted(temp_files(folder)) == kept
    assert sorted(n for n, _ in lvl.swept) == sorted(n for n, (_, gone) in names.items() if gone)
    assert lvl.skipped["partial"] == len(kept) and lvl.state == "on"
    assert dict(lvl.swept)[f"{img}.{HOST}-{dead_pid}-aa.tmp"] == f"its writer (pid {dead_pid}) is not running"


def test_an_entry_another_server_removes_while_the_folder_is_indexed_is_no_skip(tmp_path, monkeypatch):
    """Another server sharing the folder evicts an entry (its sidecar, then its image) just after this one
    listed the folder: the index counted it as a damaged file ('unreadable sidecar (FileNotFoundError ...)',
    strata_cache_skipped_files_total{reason="damaged"}) and the start-up warned of a damaged file that never
    was. It is simply not an entry. The listing is the real one; the removal is real, placed right after it."""
    folder = tmp_path / "cold"
    writer = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, piece_bytes=PIECE)
    writer.open()
    keys = [f"{k:032x}" for k in (1, 2, 3)]
    for i, key in enumerate(keys):
        writer.add(writer.write(key, "conversation", list(range(10 + i)), [payload(i, 0)], time.time()))
    real_listdir = os.listdir

    def listdir_then_evicted(path):
        names = real_listdir(path)
        if os.path.abspath(path) == str(folder):
            writer.forget(keys[1])          # the other server's eviction lands after the listing
        return names

    monkeypatch.setattr(os, "listdir", listdir_then_evicted)
    lvl = DiskLevel("cold", str(folder), 0, 0.0, IDENTITY, piece_bytes=PIECE)
    lvl.open()
    assert sorted(lvl.entries) == [keys[0], keys[2]]
    assert not lvl.skipped and not lvl.skipped_files
