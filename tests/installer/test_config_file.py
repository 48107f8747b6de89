"""The configuration file: written atomically with a reason per key, read back, shown, and accepted
by the server's own loader (strata.server.config)."""

from __future__ import annotations

import argparse
import io
import os
import re
import stat
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from strata.installer import config_file
from strata.installer.cli import run as cli_run
from strata.installer.plan import default_answers, make_plan

from tests.installer.matrix_data import situation


def _plan(machine="seed-002-desktop", model="8B"):
    s = situation(machine, model)
    return make_plan(s, default_answers(s))


def test_round_trip_keeps_values_and_reasons(tmp_path):
    plan = _plan()
    path = config_file.write(plan, tmp_path / "sub" / "config.toml", datetime(2026, 11, 29, tzinfo=timezone.utc))
    values, reasons = config_file.read(path)
    assert values == plan.config()
    assert reasons == {c.key: c.reason for c in plan.choices}
    assert not list(path.parent.glob(".config-*"))  # the temporary file was renamed, not left behind


def test_show_prints_every_key_with_its_reason(tmp_path, capsys):
    plan = _plan()
    path = config_file.write(plan, tmp_path / "c.toml")
    args = argparse.Namespace(show=True, config=path)
    assert cli_run(args) == 3       # the plan's model is a made-up path: serve would stop on it, status 3
    shown = capsys.readouterr().out
    assert f"the model could not be loaded: {path}: model = /m/Meta-Llama-3.1-8B" in shown   # the file's key, no flag
    for c in plan.choices:
        assert c.key in shown and c.reason in shown


def test_show_checks_what_serve_checks_before_listening(tmp_path, capsys, default_model_path, tiny_model_factory):
    # --show called a file valid that serve then refused: a model since deleted, kv_type q8_0 on deepseek2's
    # 576-wide latent head (here 256 + 32), contexts no memory here holds
    path = tmp_path / "c.toml"
    path.write_text(f'model = "{default_model_path}"\nctx = 4096\nbatch = 0\nthreads = 1\n')
    assert cli_run(argparse.Namespace(show=True, config=path)) == 0
    assert "valid: `strata serve` accepts this file" in capsys.readouterr().out
    latent = tiny_model_factory(arch="deepseek2", n_layer=2, n_ff=32, n_expert=4, n_expert_used=2, n_rot=32,
                                mla={"kv_lora_rank": 256})
    for text, status, said in [
        (f'model = "{latent}"\nctx = 256\nbatch = 0\nkv_type = "q8_0"\n', 2, "use --kv-type f16"),
        (f'model = "{tmp_path / "gone.gguf"}"\n', 3, "gone.gguf: no such file"),
        (f'model = "{default_model_path}"\nctx = 1000000\nbatch = 8\nslot_ctx = 1000000\n', 2,
         "lower --ctx, --slot-ctx or --batch"),
    ]:
        path.write_text(text)
        assert cli_run(argparse.Namespace(show=True, config=path)) == status, text
        problems = capsys.readouterr().out.split(f"problems: `strata serve` refuses this file (exit status {status})")
        assert len(problems) == 2 and said in problems[1], (text, problems[-1])


def test_show_without_a_file_says_so(tmp_path, capsys):
    assert cli_run(argparse.Namespace(show=True, config=tmp_path / "none.toml")) == 1
    assert "no configuration file there (run `strata setup`)" in capsys.readouterr().err


def test_a_damaged_file_is_named(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("ctx = = 3\n")
    with pytest.raises(config_file.ConfigFileError, match=r"bad\.toml: not valid TOML"):
        config_file.read(bad)


def test_warnings_are_written_as_comments_and_the_env_table_is_shown(tmp_path):
    plan = _plan("small-laptop", "32B")
    path = config_file.write(plan, tmp_path / "c.toml")
    assert "# WARNING: the model (18.5 GiB)" in path.read_text()
    with open(path, "a") as f:
        f.write("\n[env]\nSTRATA_SLOT_EXPIRE_S = 600\n")
    values, reasons = config_file.read(path)
    assert values["env"] == {"STRATA_SLOT_EXPIRE_S": 600} and "STRATA_SLOT_EXPIRE_S" not in reasons
    assert "STRATA_SLOT_EXPIRE_S = 600" in config_file.format_show(path)


def test_the_paths_are_the_servers_and_the_caches():
    server_config = pytest.importorskip("strata.server.config")
    assert config_file.default_config_path() == server_config.default_config_path()
    cache_options = pytest.importorskip("strata.server.cache.options")
    assert str(config_file.default_cold_dir()) == cache_options.default_cold_dir()


@pytest.mark.parametrize("machine,model", [("small-laptop", "32B"), ("laptop", "1B"), ("workstation", "8B")])
def test_the_server_loader_accepts_the_file(tmp_path, machine, model):
    server_config = pytest.importorskip("strata.server.config")
    pytest.importorskip("strata.server.cache.options", reason="the cache's options are not in this tree yet")
    plan = _plan(machine, model)
    path = config_file.write(plan, tmp_path / "c.toml")
    loaded = server_config.load_config({}, config_path=path, environ={})
    for key, value in plan.config().items():
        assert loaded.values[key] == value, key


def run_setup(tmp_path: Path) -> str:
    """`strata setup --yes` in the terminal on a laptop for a 3B model, writing tmp_path/c.toml (no benchmark, the
    cold folder in tmp_path): what it printed."""
    from dataclasses import replace

    from strata.installer.cli import run_terminal

    s = situation("laptop", "3B")
    s = replace(s, cold_disk=replace(s.cold_disk, folder=str(tmp_path / "cold")))
    out = io.StringIO()
    args = argparse.Namespace(yes=True, config=tmp_path / "c.toml", show=False, model=None, cold_dir=None,
                              skip_bench=True, disk_bench_mib=8)
    assert run_terminal(args, None, out, situation=s) == 0
    return out.getvalue()


def test_the_written_file_is_what_the_terminal_prints(tmp_path):
    printed = run_setup(tmp_path)
    values, reasons = config_file.read(Path(tmp_path / "c.toml"))
    for key, reason in reasons.items():
        assert key in printed and reason in printed


def test_strata_config_points_setup_where_serve_reads(tmp_path):
    target = tmp_path / "elsewhere.toml"
    assert config_file.configured_path({"STRATA_CONFIG": str(target)}) == target
    assert config_file.configured_path({}) == config_file.default_config_path()


def test_a_different_file_already_there_is_kept_as_bak(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("ctx = 1024\n")
    config_file.write(_plan(), path)
    assert config_file.backup_path(path).read_text() == "ctx = 1024\n"
    config_file.write(_plan(), path)  # the same text again: the backup is not replaced by it
    assert config_file.backup_path(path).read_text() == "ctx = 1024\n"


def test_a_replace_windows_refuses_leaves_the_previous_file_in_place(tmp_path, monkeypatch):
    # Windows refuses to replace a file another process holds (a virus scanner, an editor): PermissionError. The
    # previous file was moved to .bak first, so the failure left no config.toml and the app's next start showed
    # the first-run wizard. The refusal is simulated: Linux replaces a file whoever holds it.
    path = tmp_path / "c.toml"
    path.write_text("ctx = 1024\n", encoding="utf-8")
    replace_file = config_file.os.replace

    def held(src, dst):
        if Path(dst) == path:
            raise PermissionError(13, "The process cannot access the file because it is being used by another "
                                      "process", str(dst))
        replace_file(src, dst)
    monkeypatch.setattr(config_file.os, "replace", held)
    with pytest.raises(PermissionError):
        config_file.write(_plan(), path)
    assert path.read_text(encoding="utf-8") == "ctx = 1024\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "c.toml.bak"]   # no temporary file left
    monkeypatch.setattr(config_file.os, "replace", replace_file)
    config_file.write(_plan(), path)      # once it is let go
    assert config_file.read(path)[0] == _plan().config()
    assert config_file.backup_path(path).read_text(encoding="utf-8") == "ctx = 1024\n"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_the_bak_is_as_private_as_the_file_it_keeps(tmp_path):
    # config.toml may hold an api_key; `write` makes it 0600. Its .bak was made by a plain copy (aac6672) with
    # umask's mode, 0644: any user of the machine could read the key (a move, before, kept the file's mode)
    path = tmp_path / "c.toml"
    path.write_text('api_key = "sk-local-secret"\nctx = 1024\n', encoding="utf-8")
    path.chmod(0o600)
    umask = os.umask(0o022)
    try:
        config_file.write(_plan(), path)
    finally:
        os.umask(umask)
    bak = config_file.backup_path(path)
    assert bak.read_text(encoding="utf-8") == 'api_key = "sk-local-secret"\nctx = 1024\n'
    assert stat.S_IMODE(bak.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "c.toml.bak"]   # no temporary file left
    hand_made = tmp_path / "d.toml"       # a file the user made readable keeps that mode in its .bak, as a move did
    hand_made.write_text("ctx = 1024\n", encoding="utf-8")
    hand_made.chmod(0o644)
    config_file.write(_plan(), hand_made)
    assert stat.S_IMODE(config_file.backup_path(hand_made).stat().st_mode) == 0o644


def test_a_config_path_that_cannot_be_written_is_reported(tmp_path, capsys):
    from dataclasses import replace

    from strata.installer.cli import run_terminal

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    s = situation("laptop", "1B")
    s = replace(s, cold_disk=replace(s.cold_disk, folder=str(tmp_path / "cold")))
    args = argparse.Namespace(yes=True, config=blocker / "c.toml", show=False, model=None, cold_dir=None,
                              skip_bench=True, disk_bench_mib=8)
    assert run_terminal(args, None, io.StringIO(), situation=s) == 1
    assert f"cannot write {blocker / 'c.toml'}" in capsys.readouterr().err


def test_show_checks_the_file_with_the_servers_loader_and_names_each_bad_key(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('ctx = "big"\nkv_type = "q9"\nbogus = 1\nbatch = 2\nctxx = 3\nctx_size = 4\n')
    assert cli_run(argparse.Namespace(show=True, config=path)) == 2          # serve's exit status for it
    out = capsys.readouterr().out
    assert 'ctx' in out and '"big"' in out                                   # still shown
    problems = out.split("problems:", 1)[1]
    assert "ctx: expected a number of tokens (8192, 32k, 1m), got 'big'" in problems
    assert "kv_type: 'q9' is not one of f16, q8_0" in problems
    assert "bogus: unknown key" in problems and "batch" not in problems
    assert "ctxx: unknown key (did you mean ctx?)" in problems              # the hint serve gives
    assert "ctx_size: unknown key (did you mean ctx?)" in problems          # llama.cpp's name


def test_show_names_a_combination_the_server_refuses(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text("ctx = 1024\nslot_ctx = 2048\n")
    assert cli_run(argparse.Namespace(show=True, config=path)) == 2
    assert "--slot-ctx 2048 is larger than --ctx 1024" in capsys.readouterr().out.split("problems:", 1)[1]


def test_the_servers_loader_agrees_with_show(tmp_path):
    from strata.server.config import ConfigError, file_problems, load_config

    path = tmp_path / "c.toml"
    path.write_text('ctx = "big"\n')
    with pytest.raises(ConfigError, match=re.escape("ctx: expected a number of tokens (8192, 32k, 1m), got 'big'")):
        load_config({}, config_path=path, environ={})
    assert file_problems(path) == ["ctx: expected a number of tokens (8192, 32k, 1m), got 'big'"]


def test_setup_refuses_a_model_the_engine_cannot_run_and_writes_nothing(tmp_path, tiny_model_factory):
    """`strata setup --yes --model X` with an architecture the engine does not run stops with its words
    (it wrote a configuration the server could not start before)."""
    from dataclasses import replace

    from strata.installer.cli import run_terminal

    s = situation("laptop", "1B")
    s = replace(s, cold_disk=replace(s.cold_disk, folder=str(tmp_path / "cold")))
    unknown = tiny_model_factory(arch="phi3")
    args = argparse.Namespace(yes=True, config=tmp_path / "c.toml", show=False, model=str(unknown), cold_dir=None,
                              skip_bench=True, disk_bench_mib=8)
    with pytest.raises(SystemExit) as stop:
        run_terminal(args, None, io.StringIO(), situation=s)
    assert "unsupported architecture 'phi3'" in str(stop.value) and "(pass another --model PATH)" in str(stop.value)
    assert not (tmp_path / "c.toml").exists()
