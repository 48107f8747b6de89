"""The quiet after a refusal that outlasted the holder waits (fileio.HOLDER_STILL_HELD_S) is the removals': a removal
refused is left for the next start, while a rename carries a write (a park's image or sidecar, a session's save).
Linux has no sharing violations: the refusals are real ones (a read-only folder: a bind mount for root), the test's
FileIO only says such a refusal is one that may end, as `held_by_another` says of WinError 5, 32 and 33."""

from __future__ import annotations

import pytest

from tests.cache.test_read_only_folder import read_only
from tests.cache.test_windows_held_folder import ReadOnlyAsHeld, holder_lets_go_at_second_refusal


def test_a_rename_in_a_quiet_folder_is_still_waited_for(tmp_path):
    """The quiet is for removals: one refused is left for the next start. A rename carries a write (a park's image
    or sidecar, a session's save): refused at once in a folder where another file's removal outlasted the waits (an
    image another server maps for its whole restore), a park or save an antivirus held for a moment failed, where it
    waited 0.31 s and went through before the quiet."""
    folder = tmp_path / "cold"
    folder.mkdir()
    (folder / "strata-conv-0.img").write_bytes(b"x" * 10)
    (folder / "strata-conv-1.img.tmp").write_bytes(b"y" * 10)
    io = ReadOnlyAsHeld()
    with read_only(folder), pytest.raises(OSError):   # the removal outlasts the waits: the folder's quiet begins
        io.remove(str(folder / "strata-conv-0.img"))
    with holder_lets_go_at_second_refusal(io, folder):   # the rename's holder lets go at its second refusal
        io.rename(str(folder / "strata-conv-1.img.tmp"), str(folder / "strata-conv-1.img"))
    assert io.asked == 2 and (folder / "strata-conv-1.img").read_bytes() == b"y" * 10
