"""The wizard's model page refuses what cannot be a model with the reason, in the words of a window: its list
has no numbers (a new-user trial read "(a number from the list, or a path)" under the drop-down), and a file is
judged by its content, not its name ("README.md" given by its path said "not a .gguf file, nor the id of one
listed"). Real Qt offscreen, the real default model found."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from strata.installer.wizard.setup_wizard import SetupWizard  # noqa: E402


@pytest.mark.parametrize(("typed", "said"), [
    ("README", "'README' is not a .gguf file, nor the id of one listed (choose one from the list, or give a path)"),
    ("SmolLM2-135M", "did you mean SmolLM2-135M-Instruct.Q4_1?"),
    ("{tmp}/README.md", "{tmp}/README.md: not a GGUF file"),
    ("{tmp}/absent.gguf", "{tmp}/absent.gguf: no such file"),
])
def test_the_model_page_refuses_with_the_reason(qtbot, tmp_path, default_model_path, typed, said):
    (tmp_path / "README.md").write_text("# notes\n", encoding="utf-8")
    wizard = SetupWizard(config_path=tmp_path / "config.toml", run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    page = wizard.currentPage()
    page.combo.setCurrentText(typed.format(tmp=tmp_path))
    wizard.next()
    assert wizard.currentPage() is page
    assert said.format(tmp=tmp_path) in page.error.text(), page.error.text()
    assert "number" not in page.error.text()
    wizard.reject()
