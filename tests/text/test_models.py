"""find_models / default_model_path / `strata models`: the default model, folders, bad files."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from strata.engine.models import describe_model, find_models

from strata.cli import main as strata_main


def test_default_model_is_found_and_described(default_model_path):
    from strata.engine.models import default_model_path as find_default

    assert find_default() == default_model_path
    info = describe_model(default_model_path, is_default=True)
    assert info.error is None
    assert (info.arch, info.quant, info.n_ctx_train) == ("llama", "Q4_1", 8192)
    assert 130e6 < info.n_params < 140e6  # SmolLM2-135M
    assert info.size_bytes == default_model_path.stat().st_size


def test_folders_are_searched_recursively_and_bad_files_listed(tmp_path, tiny_model_factory, default_model_path):
    tiny = tiny_model_factory(n_layer=1, n_embd=64, n_head=2, n_head_kv=1, n_ff=128, n_vocab=512,
                              dtype="Q8_0", seed=1)
    (tmp_path / "sub").mkdir()
    shutil.copy(tiny, tmp_path / "sub" / "tiny.gguf")
    (tmp_path / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    (tmp_path / "notes.txt").write_text("not a model")
    models = find_models([tmp_path, tmp_path / "sub" / "tiny.gguf"], include_user_dir=False)
    by_name = {m.path.rsplit("/", 1)[-1]: m for m in models}
    assert set(by_name) == {default_model_path.name, "broken.gguf", "tiny.gguf"}  # each file once
    assert by_name[default_model_path.name].is_default
    assert by_name["tiny.gguf"].error is None and by_name["tiny.gguf"].quant == "Q8_0"
    assert by_name["tiny.gguf"].arch == "llama"
    assert by_name["broken.gguf"].error and "GGUF" in by_name["broken.gguf"].error
    assert by_name["broken.gguf"].arch is None
    assert by_name["tiny.gguf"].cannot_run is None


def test_a_readable_model_the_engine_cannot_run_is_marked(tmp_path, tiny_model_factory, capsys):
    shutil.copy(tiny_model_factory(arch="phi3"), tmp_path / "phi.gguf")
    shutil.copy(tiny_model_factory(arch="qwen3moe", n_expert=4, n_expert_used=2), tmp_path / "moe.gguf")
    models = {m.path.rsplit("/", 1)[-1]: m for m in find_models([tmp_path], include_default=False,
                                                                include_user_dir=False)}
    assert models["phi.gguf"].arch == "phi3" and models["phi.gguf"].error is None
    assert models["phi.gguf"].cannot_run.startswith("unsupported architecture 'phi3' (supported: llama")
    assert models["moe.gguf"].cannot_run is None
    assert strata_main(["models", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"! {tmp_path / 'phi.gguf'}: Strata cannot run it: unsupported architecture 'phi3'" in out


def test_cli_json_and_table(tmp_path, capsys, default_model_path):
    (tmp_path / "broken.gguf").write_bytes(b"nope")
    assert strata_main(["models", "--dir", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    paths = {m["path"]: m for m in listed}
    assert str(default_model_path) in paths
    assert paths[str(tmp_path / "broken.gguf")]["error"]
    assert strata_main(["models", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "llama" in out and "Q4_1" in out and "(unreadable)" in out and "error:" in out
    # One naming rule (strata/model_names.py): the file name is the id, general.name the description.
    assert "SmolLM2-135M-Instruct.Q4_1" in out and "Smollm2 135M" in out


def test_cli_missing_dir_is_reported(tmp_path, capsys):
    assert strata_main(["models", "--dir", str(tmp_path / "absent")]) == 1
    assert "no such file or folder" in capsys.readouterr().err


def test_cli_a_file_given_as_dir_is_reported(tmp_path, capsys, tiny_model_factory):
    """A new-user trial's `strata models --dir README.md` listed the other models and exited 0, the file left out
    without a word; a .gguf file given so is listed."""
    notes = tmp_path / "README.md"
    notes.write_text("# notes\n", encoding="utf-8")
    assert strata_main(["models", "--dir", str(notes)]) == 1
    assert f"strata models: --dir {notes}: a file, not a folder" in capsys.readouterr().err
    model = tiny_model_factory(ctx_len=256, n_vocab=300, seed=5)
    assert strata_main(["models", "--dir", str(model)]) == 0
    assert str(model) in capsys.readouterr().out


def test_a_model_with_experts_is_listed_with_them_and_its_active_parameters(tmp_path, tiny_model_factory, capsys):
    """Qwen3-Coder-30B-A3B is known by its 3B active parameters: the list says how many experts a token runs
    of how many, and the parameters one token reads (the experts' share counted n_expert_used / n_expert)."""
    moe = tiny_model_factory(arch="qwen3moe", n_expert=8, n_expert_used=2, n_embd=64, n_ff=128, seed=2)
    shutil.copy(moe, tmp_path / "moe.gguf")
    shutil.copy(tiny_model_factory(n_layer=1, dtype="F32", seed=3), tmp_path / "dense.gguf")
    models = {m.path.rsplit("/", 1)[-1]: m for m in find_models([tmp_path], include_default=False,
                                                                include_user_dir=False)}
    m = models["moe.gguf"]
    experts = 2 * 3 * 8 * 64 * 128            # 2 layers x (gate, up, down) x 8 experts x n_embd x n_ff
    assert (m.n_expert, m.n_expert_used) == (8, 2)
    assert m.n_params_active == m.n_params - experts * 6 // 8
    dense = models["dense.gguf"]
    assert (dense.n_expert, dense.n_expert_used, dense.n_params_active) == (0, 0, dense.n_params)
    assert dense.quant == "F32"               # general.file_type 0 is llama.cpp's ALL_F32
    assert strata_main(["models", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.split()[0:1] == ["moe"])
    assert "2/8" in row and "active" in out.splitlines()[0] + row
    assert strata_main(["models", "--dir", str(tmp_path), "--json"]) == 0
    listed = {j["path"].rsplit("/", 1)[-1]: j for j in json.loads(capsys.readouterr().out)}
    assert (listed["moe.gguf"]["n_expert"], listed["moe.gguf"]["n_expert_used"]) == (8, 2)


def test_the_table_says_where_your_own_models_go(tmp_path, capsys, monkeypatch):
    # it listed the default model and said nothing of the folder it searches for yours
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert strata_main(["models"]) == 0
    folder = tmp_path / "data" / "strata" / "models"
    assert f"your models folder: {folder} (does not exist yet): put .gguf files there" in capsys.readouterr().out
    folder.mkdir(parents=True)
    assert strata_main(["models"]) == 0
    assert f"your models folder: {folder}: put .gguf files there (another folder: --dir DIR)" in capsys.readouterr().out


def test_model_takes_the_id_strata_models_shows(tmp_path, tiny_model_factory, monkeypatch, capsys):
    # `strata models` shows ids; `--model GLM-4.7-Flash-tiny` said "no such file (`strata models` lists the GGUF
    # files Strata can find)", and that list showed the very id given (setup's model question takes ids too)
    from strata.engine.models import resolve_model
    from strata.server.app import model_path
    from strata.server.config import load_config

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    folder = tmp_path / "data" / "strata" / "models"
    (folder / "more").mkdir(parents=True)
    mine = folder / "GLM-4.7-Flash-tiny.gguf"
    shutil.copy(tiny_model_factory(arch="deepseek2", n_layer=2, n_ff=32, n_expert=4, n_expert_used=2), mine)
    assert model_path(load_config({"model": "GLM-4.7-Flash-tiny"}, environ={})) == mine
    assert resolve_model("--model", str(mine)) == mine
    assert strata_main(["bench", "--quick", "--json", "--model", "GLM-4.7-Flash-tiny"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(mine)
    assert strata_main(["chat", "--model", "nothing-of-that-id"]) == 3     # serve's status: model not loaded
    assert "--model nothing-of-that-id: no such file (`strata models` lists" in capsys.readouterr().err
    shutil.copy(mine, folder / "more" / "GLM-4.7-Flash-tiny.gguf")        # two files of one id: a path is needed
    assert strata_main(["chat", "--model", "GLM-4.7-Flash-tiny"]) == 3
    assert "no such file, and 2 files have that id: give the path of one" in capsys.readouterr().err


def test_model_takes_the_file_name_and_another_case_and_names_the_id_meant(tmp_path, tiny_model_factory,
                                                                          monkeypatch):
    """A new user typed the file name `strata models` prints (`...Q4_1.gguf`) or the id in lower case: "no such
    file"; a partial id (`SmolLM2`) got no word of the one meant."""
    from strata.engine.models import resolve_model

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    folder = tmp_path / "data" / "strata" / "models"
    folder.mkdir(parents=True)
    mine = folder / "Tiny-Coder-7B.Q4_1.gguf"
    shutil.copy(tiny_model_factory(), mine)
    monkeypatch.chdir(tmp_path)                      # not where the file is: a bare name is an id, not a path
    for given in ("Tiny-Coder-7B.Q4_1", "Tiny-Coder-7B.Q4_1.gguf", "tiny-coder-7b.q4_1", "TINY-CODER-7B.Q4_1.GGUF"):
        assert resolve_model("--model", given) == mine, given
    for given in ("Tiny-Coder", "Tiny-Coder-7B.Q4-1"):
        with pytest.raises(FileNotFoundError, match=r"did you mean --model Tiny-Coder-7B\.Q4_1\?"):
            resolve_model("--model", given)
    with pytest.raises(FileNotFoundError, match=r"no such file \(`strata models` lists"):
        resolve_model("--model", "qwen3-coder")


@pytest.mark.parametrize("command", [["chat", "--ctx", "64"], ["bench", "--quick"]])
def test_a_folder_given_as_the_model_is_named_a_folder(tmp_path, command, capsys):
    """`strata serve --model FOLDER` said "a folder, not a GGUF file"; chat and bench said "no such file"."""
    assert strata_main([*command, "--model", str(tmp_path)]) != 0
    assert f"--model {tmp_path}: a folder, not a GGUF file (`strata models --dir {tmp_path}` lists" in \
        capsys.readouterr().err


def test_damaged_file_advice_says_download_again_only_for_damage(tiny_model_factory, tmp_path):
    """A file of a newer GGUF version is whole: 'download it again' would send a user round the same loop
    (it said so for every GGUF error); a tensor type it does not know may be a newer quantization. A file
    cut short still says download it again."""
    import struct

    from strata.engine import GGUFError, check_model
    from strata.engine.models import damaged_file_advice

    data = tiny_model_factory().read_bytes()

    def advice(raw: bytes) -> str:
        path = tmp_path / "m.gguf"
        path.write_bytes(raw)
        with pytest.raises(GGUFError) as e:
            check_model(path)
        return damaged_file_advice(e.value)

    newer = bytearray(data)
    struct.pack_into("<I", newer, 4, 4)                  # the version after the magic
    says = advice(bytes(newer))
    assert "update Strata" in says and "download it again" not in says, says
    says = advice(data[: len(data) // 2])
    assert "incomplete or damaged" in says and "download it again" in says, says


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_model_path_that_is_there_but_no_file_is_not_called_missing(tmp_path, capsys):
    """`--model /dev/null` (or a named pipe) said "no such file", of a path that is there: it is not a file."""
    pipe = tmp_path / "model.gguf"
    os.mkfifo(pipe)
    for given in (str(pipe), "/dev/null"):
        assert strata_main(["chat", "--ctx", "64", "--model", given]) == 3    # serve's 'model not loaded'
        err = capsys.readouterr().err
        assert f"--model {given}: not a file (a device or a pipe): give a GGUF model file" in err, err


def test_the_json_list_gives_each_model_the_id_the_table_shows(tmp_path, tiny_model_factory, capsys):
    """`--json` had `name` (the file's general.name, the table's DESCRIPTION) and no id: a script could not
    get the name `--model`, GET /v1/models and the monitor use without cutting `.gguf` off the path itself."""
    shutil.copy(tiny_model_factory(), tmp_path / "My-Coder.Q4_K_M.gguf")
    assert strata_main(["models", "--dir", str(tmp_path), "--json"]) == 0
    listed = {m["path"]: m for m in json.loads(capsys.readouterr().out)}
    mine = listed[str(tmp_path / "My-Coder.Q4_K_M.gguf")]
    assert mine["id"] == "My-Coder.Q4_K_M"
    assert all(m["id"] == os.path.basename(m["path"]).removesuffix(".gguf") for m in listed.values())


def test_the_default_models_id_that_setup_writes_still_serves_beside_a_copy_in_the_models_folder(
        tmp_path, monkeypatch, default_model_path):
    """Since 4222205 setup writes the default model by its id (model = "SmolLM2-135M-Instruct.Q4_1"), meaning
    the one installed with Strata. A user who later put the same file in the models folder (a tutorial's
    download) found the server refusing that file: '2 files have that id: give the path of one' (status 3, the
    app's server failed). That id takes the installed default model; another id of two files still needs a path."""
    from strata.engine.models import default_model_path as installed
    from strata.server.app import model_path
    from strata.server.config import load_config

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    folder = tmp_path / "data" / "strata" / "models"
    folder.mkdir(parents=True)
    shutil.copy(installed(), folder / installed().name)
    assert model_path(load_config({"model": installed().stem}, environ={})) == installed()
