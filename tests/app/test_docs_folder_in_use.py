"""docs/app.md's item 3 (the app's restarts and the refusals it does not retry) says that a conversation folder
another Strata server of the same model holds is refused (exit status 2) and not retried, and what the app says to
do (app/restart_policy.py, fdec225): the item named only the configuration's refusal under status 2, whose advice
(fix the file) is not what the app says for a folder in use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from strata.app.restart_policy import IN_USE_ADVICE

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "app.md").read_text(encoding="utf-8")


def item(n: int) -> str:
    m = re.search(rf"^{n}\. \*\*.*?(?=^{n + 1}\. \*\*)", PAGE, re.S | re.M)
    assert m, f"docs/app.md has no item {n}"
    return " ".join(m.group(0).split())


def test_item_3_says_a_folder_in_use_is_refused_and_not_retried():
    text = item(3)
    assert "another Strata server of the same model holds is refused with status 2" in text, text
    assert "not retried" in text.split("another Strata server of the same model")[1][:120], text
    # the app's advice, as restart_policy words it: stop the other server, or another folder for this one
    assert "stop that server or give this one another folder" in text, text
    assert "stop it, or give this one another folder" in IN_USE_ADVICE


@pytest.mark.parametrize("level", ["warm", "cold"])
def test_item_3_names_the_configuration_key_the_app_names(level):
    assert f"`conversation_cache_{level}_dir`" in item(3)
