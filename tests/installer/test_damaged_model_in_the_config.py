"""Setup run again over a configuration whose model file is damaged (a download cut short): the model question
proposes the default model and says why, instead of the damaged file it then refused only after Next (a
new-user trial, /tmp/apptrial/shots/d-wizard-model.png); the refusal names the file once."""

from __future__ import annotations

import pytest
from strata.installer import config_file, flow
from strata.installer.model_facts import ModelFileError, read_model_facts
from strata.installer.plan import question_for
from strata.installer.plan_types import Answers


@pytest.fixture
def damaged(tmp_path, tiny_model_factory):
    whole = tiny_model_factory(n_embd=128, n_ff=256, ctx_len=8192).read_bytes()
    path = tmp_path / "cut-short.gguf"
    path.write_bytes(whole[: len(whole) - 4096])     # its last tensor runs past the end
    return path


@pytest.fixture
def config(tmp_path, damaged):
    path = tmp_path / "config.toml"
    path.write_text(f'{config_file.HEADER}\nmodel = "{damaged}"\nctx = 2048\nbatch = 2\nslot_ctx = 1024\n')
    return path


def test_the_refusal_names_the_file_once(damaged):
    with pytest.raises(ModelFileError) as refused:
        read_model_facts(damaged)
    said = str(refused.value)
    assert said.startswith(f"{damaged}: cannot read its GGUF metadata: ") and said.count(str(damaged)) == 1, said


def test_a_damaged_model_of_the_configuration_is_not_proposed(config, damaged, default_model_path):
    s = flow.rerun_situation(config)
    q = question_for("model", s, Answers())
    assert q.default == str(default_model_path)
    assert q.reason.startswith("the default model: the configuration's own cannot be used (" + str(damaged)), q.reason
    assert "runs past the end of the file" in q.reason
    assert s.previous is not None and s.previous.model is None and s.previous.ctx == 2048   # its other answers stay


def test_a_usable_model_of_the_configuration_is_still_proposed(tmp_path, tiny_model_factory, default_model_path):
    model = tiny_model_factory(n_embd=128, n_ff=256, ctx_len=8192)
    path = tmp_path / "config.toml"
    path.write_text(f'{config_file.HEADER}\nmodel = "{model}"\nctx = 2048\n')
    q = question_for("model", flow.rerun_situation(path), Answers())
    assert q.default == str(model) and q.reason == flow.PREVIOUS_MODEL_REASON


def test_the_wizard_proposes_the_default_model_and_next_takes_it(qtbot, config, default_model_path):
    pytest.importorskip("pytestqt")
    from strata.installer.wizard.setup_wizard import SetupWizard

    wizard = SetupWizard(config_path=config, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitExposed(wizard)
    page = wizard.currentPage()
    assert page is wizard.page(wizard.page_ids["model"])
    assert page.combo.currentText() == str(default_model_path)
    assert "the configuration's own cannot be used" in page.reason.text()
    wizard.next()
    qtbot.waitUntil(lambda: wizard.currentPage() is wizard.page(wizard.page_ids["bench"]), timeout=5000)
    assert page.error.text() == "" and wizard.answers.model == str(default_model_path)
