"""docs/configuration.md's rows of the disk levels' folder flags say that a second `strata serve` of the same model
on a folder one holds is refused, exit status 2 (server/cache/server_lock.py, 5d93fc0): a user reading the flag's
row alone did not learn it (only docs/conversation-cache.md said it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from strata.server.cache.server_lock import SERVER_LOCK_WAIT_S

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")


def row_of(flag: str) -> str:
    (row,) = [line for line in PAGE.splitlines() if line.startswith(f"| `{flag}`")]
    return row


@pytest.mark.parametrize("level", ["warm", "cold", "segment", "system-prompt"])   # the last two since session 41
def test_the_folder_rows_say_a_second_server_of_the_model_is_refused(level):
    row = row_of(f"--conversation-cache-{level}-dir")
    assert "another `strata serve` of the same model" in row and "exit status 2" in row, row
    assert f"{SERVER_LOCK_WAIT_S:.0f} s" in row and "conversation-cache.md" in row, row
