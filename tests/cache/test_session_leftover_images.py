"""Images in the sessions folder that no sidecar names: never read, removed at the next start (counted
`orphan_image`), as docs/conversation-cache.md says. A DELETE whose image's move out of the way (before its removal)
is refused once the sidecar is gone
(Windows: a file another program holds open; here a read-only folder, for real) has deleted the session all the
same: it answered a 507 'could not delete' (the docs: 'one that could not be deleted is still there') for a session
no longer listed nor restorable. An older Strata's image left without its sidecar was skipped and kept for good.
Real files, the simulated engine."""

from __future__ import annotations

import logging
import os

from strata.server.cache.fileio import FileIO

from tests.cache.conftest import history, saved_before_models
from tests.cache.test_read_only_folder import read_only


class ImageMoveRefused(FileIO):
    """Real file operations; an image's rename out of the way (a DELETE moves its files to temporary names under the
    commit lock, then removes them) is made in a read-only folder, which refuses it for real (Windows: a file another
    program holds open)."""

    def __init__(self, folder) -> None:
        self.folder = folder

    def rename(self, src: str, dst: str) -> None:
        if src.endswith(".img") and dst.endswith(".tmp"):
            with read_only(self.folder):
                super().rename(src, dst)   # refused: OSError
            return
        super().rename(src, dst)


def test_a_delete_whose_image_removal_is_refused_has_deleted_the_session(make_cache, folders, caplog):
    folder = folders["sessions"]
    cache = make_cache(io=ImageMoveRefused(folder))
    cache.engine.prefill(1, history(1, 40))
    cache.save_session("work", 1)
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        assert cache.delete_session("work") is True
    assert cache.list_sessions() == [] and not cache.has_session("work")
    assert [n.endswith(".img") for n in os.listdir(folder)] == [True]       # the image only: no session
    assert any("work deleted, but an image of it cannot be removed" in r.getMessage() for r in caplog.records)
    cache.close(persist=False)
    sessions = make_cache().sessions.ensure_open()
    assert sessions.removed["orphan_image"] == 1 and os.listdir(folder) == []


def test_an_older_stratas_image_without_its_sidecar_is_removed_at_the_next_start(make_cache, folders):
    folder = folders["sessions"]
    cache = make_cache()
    cache.engine.prefill(1, history(1, 40))
    cache.save_session("work", 1)
    cache.save_session("kept", 1)
    cache.close(persist=False)
    saved_before_models(folder, "work")
    image = next(n for n in os.listdir(folder) if n.startswith("strata-session-work@"))
    os.replace(folder / image, folder / "strata-session-work.img")   # an older Strata's image ...
    os.remove(folder / "strata-session-work.json")                   # ... whose sidecar is gone (killed between)
    cache = make_cache()
    sessions = cache.sessions.ensure_open()
    assert sessions.removed["orphan_image"] == 1 and "strata-session-work.img" not in os.listdir(folder)
    assert [s["name"] for s in cache.list_sessions()] == ["kept"] and len(os.listdir(folder)) == 2


def test_a_newer_formats_image_is_left_alone(make_cache, folders):
    """A sidecar of a newer format (a newer Strata sharing the folder, or before a downgrade) may name its image
    otherwise than `image`: its images are not this Strata's to judge (_sweep_generation read `image` from any JSON
    and removed the one it did not name: that save's image, the session lost for the newer Strata)."""
    import json

    from strata.server.cache.disk import SIDECAR_VERSION

    folder = folders["sessions"]
    cache = make_cache()
    cache.engine.prefill(1, history(1, 40))
    cache.save_session("work", 1)
    cache.close(persist=False)
    sidecar = folder / f"strata-session-{cache.sessions.key_of('work')}.json"
    d = json.loads(sidecar.read_text())
    d["version"] = SIDECAR_VERSION + 1
    d["images"] = [d.pop("image")]                     # the newer format names its image otherwise
    sidecar.write_text(json.dumps(d))
    saved = sorted(os.listdir(folder))
    sessions = make_cache().sessions.ensure_open()
    assert sorted(os.listdir(folder)) == saved and sessions.removed["orphan_image"] == 0
    assert sessions.skipped["orphan_image"] == 1       # skipped (never read), said so, kept
