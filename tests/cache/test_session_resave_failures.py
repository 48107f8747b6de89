"""A session saved again under its name, failing at each step: the session saved before stays whole and restorable
(or the new one is whole), never one save's image under another's sidecar. On Windows the sidecar's rename is
refused when another program (an antivirus, an indexer, a backup tool) holds the old sidecar open: the image had
been replaced already, the undo removed the new one, and the session was gone (a 507, then a 404). Each save's
image now has a name of its own that its sidecar records; the sidecar's rename is the one step that replaces.

The renames and removals fail for real on Linux: a folder in the way of the image's name, the folder read-only at
the sidecar's rename or at the earlier image's removal (a 0555 folder, or a read-only bind mount for root), the
process killed between the two renames. Real files, the simulated engine."""

from __future__ import annotations

import contextlib
import json
import os

import pytest
from strata.server.cache.fileio import FileIO

from tests.cache.conftest import history, saved_before_models
from tests.cache.test_read_only_folder import read_only

OLD, NEW = history(1, 40), history(2, 60)


class FailingAt(FileIO):
    """Real file operations; `before[kind](path)` runs first for the next rename onto an image ('image') or a sidecar
    ('sidecar'), or the next removal of an image ('remove image'), once: what it does to the folder makes the real
    call fail."""

    def __init__(self) -> None:
        self.before: dict = {}

    def _hook(self, kind: str, path: str) -> None:
        hook = self.before.pop(kind, None)
        if hook is not None:
            hook(path)

    def rename(self, src: str, dst: str) -> None:
        self._hook("image" if dst.endswith(".img") else "sidecar", dst)
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        if path.endswith(".img"):
            self._hook("remove image", path)
        super().remove(path)


def _saved_once(make_cache, io=None):
    cache = make_cache(io=io)
    cache.engine.prefill(1, OLD)
    cache.save_session("work", 1)
    cache.engine.prefill(2, NEW)
    return cache


def _restores(cache, tokens) -> None:
    ctx = 0
    res = cache.restore_session("work", ctx)
    assert res.n_tokens == len(tokens) and cache.engine.context_tokens(ctx) == tokens, res


def _listing(folder) -> list[str]:
    return sorted(os.listdir(folder))


def _reopened(make_cache, tokens):
    """A fresh start on the folder: the session is `tokens`; what else it found is returned (the sessions level)."""
    cache = make_cache()
    assert [(s["name"], s["n_tokens"]) for s in cache.list_sessions()] == [("work", len(tokens))]
    _restores(cache, tokens)
    return cache.sessions.level


def test_an_image_rename_refused_keeps_the_earlier_session(make_cache, folders):
    io = FailingAt()
    cache = _saved_once(make_cache, io)
    before = _listing(folders["sessions"])
    io.before["image"] = os.mkdir                                    # a folder in the way of the image's name
    with pytest.raises(IsADirectoryError):
        cache.save_session("work", 2)
    assert [n for n in _listing(folders["sessions"]) if not os.path.isdir(folders["sessions"] / n)] == before
    _restores(cache, OLD)


def test_a_sidecar_rename_refused_keeps_the_earlier_session_whole(make_cache, folders):
    """The Windows case. Before: the earlier image was replaced, the new one could not be removed either (the
    folder refuses that too), and the earlier sidecar described the new image: restored as damaged."""
    io = FailingAt()
    cache = _saved_once(make_cache, io)
    with contextlib.ExitStack() as stack:
        io.before["sidecar"] = lambda _: stack.enter_context(read_only(folders["sessions"]))
        with pytest.raises(OSError):
            cache.save_session("work", 2)
        _restores(cache, OLD)                                       # while the folder still refuses
    cache.close(persist=False)
    sessions = _reopened(make_cache, OLD)
    # the new save's image was left (the folder refused its removal too): never read, removed at this start; so was
    # its sidecar's temporary file, skipped while its writer (this process) runs, removed by a start after it
    assert sessions.removed["orphan_image"] == 1 and sessions.skipped["partial"] == 1
    assert [n.rsplit(".", 2)[0] for n in _listing(folders["sessions"]) if n.endswith(".tmp")] == [
        f"strata-session-{cache.sessions.key_of('work')}.json"]
    assert len(_listing(folders["sessions"])) == 3


def test_the_earlier_image_left_when_its_removal_is_refused_is_never_read_and_goes_later(make_cache, folders):
    io = FailingAt()
    cache = _saved_once(make_cache, io)
    with contextlib.ExitStack() as stack:
        io.before["remove image"] = lambda _: stack.enter_context(read_only(folders["sessions"]))
        cache.save_session("work", 2)                              # saved: the sidecar names the new image
        _restores(cache, NEW)
        assert len(_listing(folders["sessions"])) == 3
    cache.close(persist=False)
    sessions = _reopened(make_cache, NEW)
    assert sessions.removed["orphan_image"] == 1 and len(_listing(folders["sessions"])) == 2


def test_a_process_killed_between_the_image_and_the_sidecar_keeps_the_earlier_session(make_cache, folders):
    io = FailingAt()
    cache = _saved_once(make_cache, io)
    io.before["sidecar"] = lambda _: os._exit(0)                  # killed: no undo runs
    pid = os.fork()
    if pid == 0:
        try:
            cache.save_session("work", 2)
        finally:
            os._exit(3)                                             # the hook did not run
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    images = [n for n in _listing(folders["sessions"]) if n.endswith(".img")]
    assert len(images) == 2                                         # the new image is there, beside the earlier one
    cache.close(persist=False)
    sessions = _reopened(make_cache, OLD)
    assert sessions.removed["orphan_image"] == 1 and len(_listing(folders["sessions"])) == 2


def test_a_sidecar_names_the_one_image_it_describes(make_cache, folders):
    """Two sessions of one length: the sidecar of one edited to name the other's image is damage, never restored
    with that image (sizes alone would have matched)."""
    cache = make_cache()
    cache.engine.prefill(1, OLD)
    cache.save_session("work", 1)
    cache.engine.prefill(2, history(3, 40))
    cache.save_session("other", 2)
    cache.close(persist=False)
    folder = folders["sessions"]
    other_image = next(n for n in os.listdir(folder) if n.startswith(f"strata-session-{cache.sessions.key_of('other')}@"))
    work = f"strata-session-{cache.sessions.key_of('work')}.json"
    d = json.loads((folder / work).read_text())
    d["image"] = other_image
    (folder / work).write_text(json.dumps(d))
    cache = make_cache()
    assert [s["name"] for s in cache.list_sessions()] == ["other"]
    skipped = dict((n, (reason, detail)) for n, reason, detail in cache.sessions.level.skipped_files)
    assert skipped[work][0] == "damaged", skipped
    assert "not one of its own" in skipped[work][1]


def test_an_older_stratas_image_left_by_a_re_save_goes_at_the_next_start(make_cache, folders):
    """A session an older Strata saved (`strata-session-work.img`, its sidecar naming no image) saved again by this
    one while its image's removal is refused (Windows: a file held open): the warning said the next start removes
    it, but only `@<generation>` images were swept there, so the old image (a whole session's KV) stayed for good.
    (The new save is under the model's own name; the older files are moved out of the way, then removed.)"""
    from tests.cache.test_session_leftover_images import ImageMoveRefused

    cache = _saved_once(make_cache)
    cache.close(persist=False)
    folder = folders["sessions"]
    saved_before_models(folder, "work")
    image = next(n for n in os.listdir(folder) if n.endswith(".img"))
    os.replace(folder / image, folder / "strata-session-work.img")   # the files as an older Strata wrote them
    sidecar = folder / "strata-session-work.json"
    d = json.loads(sidecar.read_text())
    del d["image"]
    sidecar.write_text(json.dumps(d))
    cache = make_cache(io=ImageMoveRefused(folder))
    _restores(cache, OLD)                                           # read as it always was
    cache.engine.prefill(2, NEW)
    cache.save_session("work", 2)                                   # saved: the sidecar names the new image
    assert "strata-session-work.img" in _listing(folder)
    cache.close(persist=False)
    sessions = _reopened(make_cache, NEW)
    assert sessions.removed["orphan_image"] == 1 and "strata-session-work.img" not in _listing(folder)
    assert len(_listing(folder)) == 2


class Recording(FileIO):
    """Real file operations, each folder sync and image removal recorded in order."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def sync_folder(self, folder: str) -> None:
        super().sync_folder(folder)
        self.done.append("sync folder")

    def remove(self, path: str) -> None:
        super().remove(path)
        if path.endswith(".img"):
            self.done.append("remove image")


def test_the_new_sidecar_is_on_disk_before_the_earlier_image_is_removed(make_cache, folders):
    """Renames and removals are only in the page cache until the folder is synced, and a file system need not write
    them in order: a power cut could keep the removal of the earlier image and lose the new sidecar's rename,
    leaving the earlier sidecar naming an image that is gone (the session lost, not 'left whole')."""
    io = Recording()
    cache = _saved_once(make_cache, io)
    io.done.clear()
    cache.save_session("work", 2)
    assert io.done == ["sync folder", "sync folder", "remove image"], io.done   # after each rename (durable_order)
    _restores(cache, NEW)
