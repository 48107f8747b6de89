"""A rename or removal Windows refuses for a moment (an antivirus or indexer scanning a file just written, a backup
tool, another server mapping an image: a handle without FILE_SHARE_DELETE) is tried again shortly, then refused as
before; POSIX refusals are never retried (Linux behaves as it did).

Linux has no sharing violations, so the refusals are real ones that end: a folder in the way of the sidecar's name,
taken away after two refusals, and a read-only bind mount made writable again. The holder's test subclass only says
that such a refusal is one that may end (what `held_by_another` says of WinError 5, 32 and 33); the renames, removals,
waits and the cache's writes are the real ones."""

from __future__ import annotations

import errno
import os
import time

import pytest
from strata.server.cache.fileio import HOLDER_RETRY_DELAYS_S, FileIO, held_by_another
from strata.server.cache.session_store import model_tag

from tests.cache.conftest import history
from tests.cache.test_read_only_folder import read_only

TOKENS = history(1, 40)


class FolderInTheWay(FileIO):
    """Real file operations; the next rename onto a sidecar finds a folder in the way of its name (Windows: another
    handle on the sidecar). `lets_go_after` refusals later the holder lets go (the folder is removed); None: never."""

    def __init__(self, lets_go_after: int | None, takes_holds_for_windows: bool = True) -> None:
        self.lets_go_after = lets_go_after
        self.takes_holds_for_windows = takes_holds_for_windows
        self.blocked: str | None = None
        self.refusals = 0
        self.waits: list[float] = []

    def rename(self, src: str, dst: str) -> None:
        if dst.endswith(".json") and self.blocked is None:
            self.blocked = dst
            os.mkdir(dst)
        super().rename(src, dst)

    def refused_for_now(self, exc: OSError) -> bool:
        self.refusals += 1
        if self.refusals == self.lets_go_after:
            os.rmdir(self.blocked)
        return self.takes_holds_for_windows and isinstance(exc, IsADirectoryError)


def _saved(make_cache, io):
    cache = make_cache(io=io)
    cache.engine.prefill(1, TOKENS)
    t0 = time.monotonic()
    try:
        cache.save_session("work", 1)
    finally:
        io.waits.append(time.monotonic() - t0)
    return cache


def test_a_sidecar_rename_refused_until_the_holder_lets_go_is_saved(make_cache, folders):
    io = FolderInTheWay(lets_go_after=2)
    cache = _saved(make_cache, io)
    assert io.refusals == 2                                         # two refusals, the third try renamed it
    assert not os.path.isdir(io.blocked) and os.path.isfile(io.blocked)
    res = cache.restore_session("work", 0)
    assert res.n_tokens == len(TOKENS) and cache.engine.context_tokens(0) == TOKENS
    assert not [n for n in os.listdir(folders["sessions"]) if n.endswith(".tmp")]


def test_a_holder_that_does_not_let_go_is_refused_after_the_short_waits(make_cache, folders):
    io = FolderInTheWay(lets_go_after=None)
    with pytest.raises(IsADirectoryError):
        _saved(make_cache, io)
    # asked after each refusal that a wait follows; the try after the last wait is refused and raised
    assert io.refusals == len(HOLDER_RETRY_DELAYS_S)
    assert sum(HOLDER_RETRY_DELAYS_S) <= io.waits[0] < sum(HOLDER_RETRY_DELAYS_S) + 2.0
    # as any refused save: nothing of it is left under the session's names but the folder in the way
    assert [n for n in os.listdir(folders["sessions"]) if not n.endswith(".tmp")] == [
        f"strata-session-work~{model_tag(make_cache().identity)}.json"]


def test_posix_refusals_are_not_retried(make_cache):
    """Linux as before: the refusal is raised at once (the holder would have let go at its second)."""
    io = FolderInTheWay(lets_go_after=2, takes_holds_for_windows=False)
    with pytest.raises(IsADirectoryError):
        _saved(make_cache, io)
    assert io.refusals == 1 and io.waits[0] < sum(HOLDER_RETRY_DELAYS_S)


class ReadOnlyForAMoment(FileIO):
    """The folder is read-only (a real read-only bind mount, or 0555 for a user that is not root) until
    `lets_go_after` refusals; a refusal of a read-only folder stands here for Windows' refusal of a held file."""

    def __init__(self, stack_exit, lets_go_after: int) -> None:
        self.stack_exit = stack_exit
        self.lets_go_after = lets_go_after
        self.refusals = 0

    def refused_for_now(self, exc: OSError) -> bool:
        self.refusals += 1
        if self.refusals == self.lets_go_after:
            self.stack_exit()
        return exc.errno in (errno.EROFS, errno.EACCES)


def test_a_removal_refused_for_a_moment_removes_the_file(tmp_path):
    folder = tmp_path / "level"
    folder.mkdir()
    path = folder / "strata-conv-0123.img"
    path.write_bytes(b"x" * 100)
    ctx = read_only(folder)
    ctx.__enter__()
    io = ReadOnlyForAMoment(lambda: ctx.__exit__(None, None, None), lets_go_after=3)
    try:
        io.remove(str(path))
    finally:
        if io.refusals < 3:
            ctx.__exit__(None, None, None)
    assert io.refusals == 3 and not path.exists()


@pytest.mark.parametrize(("winerror", "held"), [
    (5, True),      # ERROR_ACCESS_DENIED: a target held open, a file pending deletion, a mapped file
    (32, True),     # ERROR_SHARING_VIOLATION: an antivirus scanning the file just written
    (33, True),     # ERROR_LOCK_VIOLATION
    (2, False),     # ERROR_FILE_NOT_FOUND
    (3, False),     # ERROR_PATH_NOT_FOUND
    (112, False),   # ERROR_DISK_FULL
    (None, False),  # POSIX: no winerror at all
])
def test_which_windows_refusals_are_a_hold_that_may_end(winerror, held):
    exc = PermissionError(errno.EACCES, "refused")
    if winerror is not None:
        exc.winerror = winerror   # what Windows' OSError carries; POSIX's has none
    assert held_by_another(exc) is held


def test_a_real_posix_refusal_is_not_a_hold(tmp_path):
    target = tmp_path / "in-the-way"
    target.mkdir()
    src = tmp_path / "file"
    src.write_bytes(b"x")
    with pytest.raises(OSError) as refused:
        os.replace(src, target)
    assert not held_by_another(refused.value) and not FileIO().refused_for_now(refused.value)
