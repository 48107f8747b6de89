"""Fixtures shared by the setup tests: a process environment whose configuration, cache and data folders are
the test's own, and a configuration file whose answers are not the plan's (for setup run again); and the Qt wizard
walked to a page with the defaults (offscreen, no bench; Qt imported only by the tests that drive it)."""

from __future__ import annotations

import os

import pytest
from strata.installer import config_file


@pytest.fixture
def env(tmp_path) -> dict:
    return dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"),
                XDG_DATA_HOME=str(tmp_path / "data"))


@pytest.fixture
def own_answers(tmp_path, tiny_model_factory):
    """A file whose answers are not the plan's: a short context, 2 slots, a 1-GiB cold level in its own folder."""
    model = tiny_model_factory(n_embd=128, n_ff=256, ctx_len=8192)
    cold = tmp_path / "big disk"
    cold.mkdir()
    path = tmp_path / "config.toml"
    path.write_text(f'{config_file.HEADER}\nmodel = "{model}"\nctx = 2048\nbatch = 2\nslot_ctx = 1024\n'
                    f'conversation_cache_cold_dir = "{cold}"\nconversation_cache_cold_mib = 1024\nport = 8123\n')
    return path


def next_page(qtbot, wizard, expected: str):
    """Next, waited for until the wizard leaves its page; the page it comes to must be `expected`: that page."""
    before = wizard.currentId()
    wizard.next()
    qtbot.waitUntil(lambda: wizard.currentId() != before, timeout=5000)
    assert wizard.currentPage() is wizard.page(wizard.page_ids[expected])
    return wizard.currentPage()


def wizard_at_disk_page(qtbot, tmp_path):
    """The setup wizard (its cold folder tmp_path/cold) shown and walked to its disk page, each page waited for."""
    from strata.installer import flow
    from strata.installer.wizard.setup_wizard import SetupWizard

    wizard = SetupWizard(config_path=tmp_path / "qt.toml", run_bench=False,
                         situation=flow.starting_situation(cold_dir=tmp_path / "cold"))
    qtbot.addWidget(wizard)
    wizard.show()
    for name in ("bench", "concurrency", "disk"):
        wizard.next()
        qtbot.waitUntil(lambda want=name: wizard.currentPage() is wizard.page(wizard.page_ids[want]), timeout=5000)
    return wizard


def wizard_at_plan_page(qtbot, tmp_path):
    """The setup wizard (its cold folder tmp_path/c) shown at 900x600 and walked to its plan page (Next 5 times)."""
    from strata.installer import flow
    from strata.installer.wizard.setup_wizard import SetupWizard

    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=flow.starting_situation(cold_dir=tmp_path / "c"),
                         run_bench=False)
    qtbot.addWidget(wizard)
    wizard.resize(900, 600)
    wizard.show()
    qtbot.waitExposed(wizard)
    for _ in range(5):
        wizard.next()
    return wizard
