"""The refusal of a folder another server of the model holds says what sharing it does and what to turn off in the
words of the store its flag names (server/cache/server_lock.FolderInUse). 1835af4 held the segment tier's and
system-prompt cache's folders too, with the disk levels' words: "each miss the conversations the other moves down
or removes ... or run it without that level (--conversation-cache-segment-mib 0)": neither is a level, nor moves
conversations down; what two servers there do is evict the files the other still counts."""

from __future__ import annotations

import pytest
from strata.server.cache import server_lock

from tests.cache.test_server_lock import MODEL, holder  # noqa: F401  (the fixture)


@pytest.mark.parametrize(("store", "what", "why"), [
    ("cold", "that level", "each miss the conversations the other moves down or removes"),
    ("warm", "that level", "each miss the conversations the other moves down or removes"),
    ("segment", "the segment tier", "each evicts files the other still counts, past the folder's budget"),
    ("system-prompt", "the system-prompt cache", "each evicts files the other still counts, past the folder's budget"),
])
def test_the_refusal_speaks_of_its_store(tmp_path, holder, store, what, why):  # noqa: F811
    holder(tmp_path / "shared")
    flag = f"--conversation-cache-{store}-dir"
    with pytest.raises(server_lock.FolderInUse) as e:
        server_lock.claim(flag, str(tmp_path / "shared"), MODEL, wait_s=0)
    said = str(e.value)
    assert f"{flag} {tmp_path / 'shared'}: " in said and f"two servers on one folder {why}" in said, said
    assert f"or run it without {what} (--conversation-cache-{store}-mib 0)" in said, said
