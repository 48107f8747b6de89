"""strata serve's configuration: defaults < TOML file < environment < flags, the [env] table, aliases,
unknown keys and bad values refused with their names; the CLI's exit status on a bad value."""

from __future__ import annotations

import argparse

import pytest
from strata.server.cli import add_arguments, run, validate
from strata.server.config import ConfigError, config_from_args, load_config


def write(tmp_path, text: str):
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_defaults_without_a_file():
    c = load_config({}, environ={})
    assert (c.ctx, c.batch, c.batch_groups, c.host, c.port) == (8192, 4, 1, "127.0.0.1", 8080)
    assert c.slot_ctx_effective == 8192 and c.api_key is None and c.queue == 64


def test_file_then_environment_then_flags(tmp_path):
    p = write(tmp_path, 'ctx = 4096\nbatch = 2\napi_key = "from-file"\nport = 9000\n')
    c = load_config({}, config_path=p, environ={})
    assert (c.ctx, c.batch, c.api_key, c.port) == (4096, 2, "from-file", 9000)
    c = load_config({}, config_path=p, environ={"STRATA_API_KEY": "from-env"})
    assert c.api_key == "from-env"
    c = load_config({"api_key": "from-flag", "ctx": "2048"}, config_path=p, environ={"STRATA_API_KEY": "x"})
    assert (c.api_key, c.ctx, c.batch) == ("from-flag", 2048, 2)


def test_env_table_and_the_environment_wins(tmp_path):
    p = write(tmp_path, "[env]\nSTRATA_SLOT_EXPIRE_S = 600\nSTRATA_SLOT_TTL_MAX_S = 60\n")
    c = load_config({}, config_path=p, environ={"STRATA_SLOT_TTL_MAX_S": "90", "HOME": "/x"})
    assert c.env["STRATA_SLOT_EXPIRE_S"] == "600" and c.env["STRATA_SLOT_TTL_MAX_S"] == "90"
    assert "HOME" not in c.env


@pytest.mark.parametrize("text,needle", [
    ("ctx = 4096\nbogus_key = 1\n", "unknown key(s): bogus_key"),
    ('ctx = "big"\n', "ctx: expected a number of tokens (8192, 32k, 1m), got 'big'"),
    ("ctx = 8\n", "ctx: 8 is below the minimum 16"),
    ('kv_type = "q9"\n', "kv_type: 'q9' is not one of f16, q8_0"),
    ('kv_type = "f32"\n', "kv_type: 'f32' is not one of f16, q8_0"),
    ("port = 70000\n", "port: 70000 is above the maximum 65535"),
    ("[env]\nPATH = 1\n", "[env] PATH: only STRATA_* variables belong there"),
    ("ctx = \n", "not valid TOML"),
    ("batch = 2\nbatch_groups = 3\n", "--batch-groups 3 is more than --batch 2"),
    ("ctx = 1024\nslot_ctx = 2048\n", "--slot-ctx 2048 is larger than --ctx 1024"),
])
def test_bad_files_are_refused_naming_the_problem(tmp_path, text, needle):
    with pytest.raises(ConfigError) as e:
        load_config({}, config_path=write(tmp_path, text), environ={})
    assert needle in str(e.value)


def test_a_bad_value_in_the_file_points_to_setup_show(tmp_path):
    """serve stops at the first bad value; `strata setup --show` lists every key's problem at once."""
    with pytest.raises(ConfigError, match=r"ctx: 8 is below the minimum 16 \(`strata setup --show` lists every key"):
        load_config({}, config_path=write(tmp_path, "ctx = 8\nport = 70000\n"), environ={})


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({}, config_path=tmp_path / "nope.toml", environ={})


def test_aliases_agree_or_are_refused(tmp_path):
    c = load_config({"conversation_cache_spill_dir": "/d"}, environ={})
    assert c.conversation_cache_cold_dir == "/d"
    with pytest.raises(ConfigError, match="aliases set to different values"):
        load_config({"conversation_cache_spill_dir": "/d", "conversation_cache_cold_dir": "/e"}, environ={})
    p = write(tmp_path, 'conversation_cache_cold_dir = "/a"\nconversation_cache_spill_dir = "/b"\n')
    with pytest.raises(ConfigError, match="aliases set to different values"):
        load_config({}, config_path=p, environ={})


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_command_line_flags_override_the_file(tmp_path):
    p = write(tmp_path, "ctx = 4096\nstatus_line = true\n")
    args = parse(["--config", str(p), "--ctx", "1024", "--no-status-line", "--batch", "0"])
    c = config_from_args(args, environ={})
    assert (c.ctx, c.status_line, c.batch) == (1024, False, 0)


def test_a_smaller_ctx_on_the_command_line_shrinks_the_files_slots(tmp_path):
    """`strata setup` writes slot_ctx as large as ctx; `strata serve --ctx 4096` then stopped with
    '--slot-ctx 8192 is larger than --ctx 4096', a flag its user never typed. A --slot-ctx typed too is
    still checked, and a file's slot_ctx below the new --ctx is kept."""
    setup_file = str(write(tmp_path, "ctx = 8192\nslot_ctx = 8192\nbatch = 4\n"))
    c = config_from_args(parse(["--config", setup_file, "--ctx", "4096"]), environ={})
    assert (c.ctx, c.slot_ctx, c.slot_ctx_effective, c.batch) == (4096, 4096, 4096, 4)
    c = config_from_args(parse(["--config", setup_file, "--ctx", "16384"]), environ={})
    assert (c.ctx, c.slot_ctx) == (16384, 8192)
    with pytest.raises(ConfigError, match="--slot-ctx 8192 is larger than --ctx 4096"):
        config_from_args(parse(["--config", setup_file, "--ctx", "4096", "--slot-ctx", "8192"]), environ={})
    small_slots = str(write(tmp_path, "ctx = 8192\nslot_ctx = 2048\n"))
    c = config_from_args(parse(["--config", small_slots, "--ctx", "4096"]), environ={})
    assert (c.ctx, c.slot_ctx) == (4096, 2048)


def test_policy_and_cache_settings_are_checked_before_start():
    with pytest.raises(ConfigError, match="STRATA_SLOT_EXPIRE_S"):
        validate(load_config({}, environ={"STRATA_SLOT_EXPIRE_S": "soon"}))
    with pytest.raises(ConfigError, match="conversation-cache-mib"):
        validate(load_config({"conversation_cache_mib": "-5"}, environ={}))


def test_a_bad_variable_from_the_files_env_table_says_it_was_set_there(tmp_path):
    """A new-user trial: `STRATA_SLOT_TTL_MAX_S='abc': not a number` sent them to their shell, where it was not."""
    p = write(tmp_path, '[env]\nSTRATA_SLOT_TTL_MAX_S = "abc"\n')
    with pytest.raises(ConfigError) as e:
        validate(load_config({}, config_path=p, environ={}))
    assert "STRATA_SLOT_TTL_MAX_S" in str(e.value) and f"set in the [env] table of {p}" in str(e.value)
    # the same bad value from the environment (which wins over the file) names no file
    with pytest.raises(ConfigError) as e:
        validate(load_config({}, config_path=p, environ={"STRATA_SLOT_TTL_MAX_S": "xyz"}))
    assert "xyz" in str(e.value) and "[env] table" not in str(e.value)


def test_cli_exits_2_with_the_name_of_a_bad_flag(capsys):
    assert run(parse(["--no-config", "--port", "http"])) == 2
    assert "--port: expected int, got 'http'" in capsys.readouterr().err


def test_every_server_option_is_documented():
    from pathlib import Path

    from strata.server.options import OPTIONS

    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    missing = [o.name for o in OPTIONS if f"`--{o.name}` (`{o.key}`)" not in text]
    assert not missing, f"options missing from docs/configuration.md: {missing}"


def _choices(add_arguments, flag: str) -> tuple:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return tuple(next(a for a in parser._actions if flag in a.option_strings).choices)


def _help(add_arguments) -> str:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.format_help()


def test_serve_bench_and_setup_offer_one_set_of_kv_types(tmp_path):
    import strata.engine
    from strata.engine import bench
    from strata.server import cli as serve_cli
    from strata.server.options import KV_TYPES, OPTIONS

    assert KV_TYPES == ("f16", "q8_0")
    assert set(KV_TYPES) < set(strata.engine.KV_TYPES)          # all real engine types; f32 is its reference
    assert next(o for o in OPTIONS if o.name == "kv-type").choices == KV_TYPES
    assert "--kv-type {f16,q8_0}" in _help(serve_cli.add_arguments)
    assert _choices(bench.add_arguments, "--kv-type") == KV_TYPES
    for name in KV_TYPES:       # what setup may write is what serve loads
        assert load_config({}, config_path=write(tmp_path, f'kv_type = "{name}"\n'), environ={}).kv_type == name


def test_serve_runs_with_a_q8_0_kv(tiny_model_factory):
    import httpx2 as httpx

    from tests.server.live import LiveServer

    model = tiny_model_factory(n_embd=128, n_head=4, n_head_kv=2, ctx_len=1024)    # q8_0 KV: head size 32
    with LiveServer(model=str(model), ctx=1024, batch=1, threads=1, kv_type="q8_0",
                    conversation_cache_mib=0) as server:
        r = httpx.post(server.url + "/v1/completions", json={"prompt": "Once", "max_tokens": 4, "ignore_eos": True},
                       timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        assert httpx.get(server.url + "/v1/monitor").json()["engine"]["kv_type"] == "q8_0"


def test_a_file_saved_by_windows_notepad_is_read(tmp_path, monkeypatch, capsys):
    """UTF-8 with a byte-order mark and CRLF line ends (Notepad's 'UTF-8 with BOM'): serve, `setup --show` and
    chat refused it as 'not valid TOML: Invalid statement (at line 1, column 1)'."""
    from strata.engine.chat import configured_model

    from strata.cli import main as strata_main

    p = tmp_path / "config.toml"
    p.write_bytes(b'\xef\xbb\xbfctx = 4096\r\nbatch = 2\r\nmodel = "/m/x.gguf"\r\n')
    c = load_config({}, config_path=p, environ={})
    assert (c.ctx, c.batch) == (4096, 2)
    monkeypatch.setenv("STRATA_CONFIG", str(p))
    assert configured_model() == ("/m/x.gguf", str(p))
    strata_main(["setup", "--show", "--config", str(p)])
    out = capsys.readouterr()
    assert "not valid TOML" not in out.err + out.out and "batch" in out.out, out.err


def test_a_folder_or_file_under_the_home_folder_is_written_with_a_tilde(tiny_model, tmp_path, monkeypatch):
    """`conversation_cache_cold_dir = "~/strata-cold"` in the file (as one writes it by hand; STRATA_CONFIG and
    --model took ~ already) made a folder named '~' in the directory the server started from and kept the
    conversations there, and `timeline_out = "~/t.jsonl"` was refused as 'its folder must exist'. A real server
    from that file now keeps them under the home folder."""
    import httpx2 as httpx

    from tests.server.live import LiveServer

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    p = write(tmp_path, f'model = "{tiny_model}"\nctx = 512\nbatch = 0\nthreads = 1\n'
                        'conversation_cache_cold_dir = "~/strata-cold"\nconversation_cache_cold_mib = 64\n'
                        'conversation_cache_sessions_dir = "~/sessions"\ntimeline_out = "~/t.jsonl"\n')
    c = load_config({}, config_path=p, environ={})
    assert (c.conversation_cache_cold_dir, c.conversation_cache_sessions_dir, c.timeline_out) == (
        str(home / "strata-cold"), str(home / "sessions"), str(home / "t.jsonl"))
    validate(c)                                    # the timeline's folder (the home folder) is there
    assert load_config({"conversation_cache_cold_dir": "~/x"}, environ={}).conversation_cache_cold_dir == str(home / "x")
    server = LiveServer(model=str(tiny_model), ctx=512, batch=0, threads=1, conversation_cache_cold_mib=64,
                        conversation_cache_cold_dir="~/strata-cold")
    with server:
        body = {"prompt": "kept under the home folder " * 8, "max_tokens": 2, "temperature": 0}
        assert httpx.post(server.url + "/v1/completions", json=body, timeout=60).status_code == 200
    assert not (work / "~").exists() and list((home / "strata-cold").glob("strata-conv-*.json"))


def test_serve_help_says_what_a_new_user_needs_without_internal_words():
    """A new user read `strata serve --help`: --ctx and --batch named "the solo path" (a word of the code), and
    nothing said that conversations outlive a restart only with a disk level (--conversation-cache-cold-mib is
    0 by default: a stop loses them)."""
    from strata.server import cli as serve_cli

    text = " ".join(_help(serve_cli.add_arguments).split())
    text = text[text.index("--ctx TOKENS context size"):]         # the options, past the usage lines
    assert "solo path" not in text
    assert "--batch 0" in text.split("--batch INT", 1)[0]
    cold = text.split("--conversation-cache-cold-mib INT", 1)[1].split("--conversation-cache-", 1)[0]
    assert "across a restart" in cold, cold


def test_contexts_take_k_and_m_as_the_wizard_does(tmp_path):
    """A new-user trial typed 32k in the setup wizard, then `strata serve --ctx 32k`: refused as not an int."""
    c = load_config({"ctx": "32k", "slot_ctx": "16K"}, environ={})
    assert c.values["ctx"] == 32768 and c.values["slot_ctx"] == 16384
    assert load_config({}, config_path=write(tmp_path, 'ctx = "1m"\n'), environ={}).values["ctx"] == 1 << 20
    for bad in ("32kb", "k", "1.5k"):
        with pytest.raises(ConfigError, match=rf"expected a number of tokens \(8192, 32k, 1m\), got '{bad}'"):
            load_config({"ctx": bad}, environ={})
    with pytest.raises(ConfigError, match="expected int"):
        load_config({"batch": "4k"}, environ={})    # only token counts read the suffix
