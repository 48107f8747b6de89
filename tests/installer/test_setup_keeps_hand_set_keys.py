"""Re-running `strata setup` keeps the keys of the file already there that it does not decide itself (`port`,
`host`, `api_key`, the `[env]` table, any other), each with its comment, and says so; before, the new file held
only the plan's keys and the hand-set ones survived only in the `.bak`."""

from __future__ import annotations

from strata.installer import config_file
from strata.server import config as server_config

from tests.installer.test_config_file import _plan, run_setup

HAND_SET = """# Strata configuration, written by `strata setup`. Flags given to `strata serve` override it.
ctx = 1024
# the port our editor's plugin expects
port = 8123
host = "0.0.0.0"
api_key = "sk-local-1"

[env]
STRATA_RESTORE_LADDER = "0"
"""


def test_setup_keeps_the_keys_it_does_not_decide_with_their_comments(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(HAND_SET, encoding="utf-8")
    plan = _plan()
    config_file.write(plan, path)
    values, reasons = config_file.read(path)
    assert {k: values[k] for k in plan.config()} == plan.config()        # the plan decides its own keys (ctx)
    assert values["ctx"] != 1024
    assert (values["port"], values["host"], values["api_key"]) == (8123, "0.0.0.0", "sk-local-1")
    assert values["env"] == {"STRATA_RESTORE_LADDER": "0"}
    assert reasons["port"] == "the port our editor's plugin expects" and "host" not in reasons
    assert config_file.backup_path(path).read_text(encoding="utf-8") == HAND_SET
    loaded = server_config.load_config({}, config_path=path, environ={})   # and the server reads it all
    assert loaded.values["port"] == 8123 and loaded.env["STRATA_RESTORE_LADDER"] == "0"
    config_file.write(plan, path)                                           # a third run: the same file again
    assert config_file.read(path)[0] == values


def test_the_summary_names_the_keys_kept(tmp_path):
    (tmp_path / "c.toml").write_text(HAND_SET, encoding="utf-8")
    printed = run_setup(tmp_path)
    assert "Kept from the previous configuration (keys setup does not decide): port, host, api_key, [env]" in printed
    assert f"The previous configuration is kept as {tmp_path / 'c.toml.bak'}" in printed


def test_an_unreadable_previous_file_is_said_and_kept_as_bak(tmp_path):
    (tmp_path / "c.toml").write_text("port = = 8123\n", encoding="utf-8")
    printed = run_setup(tmp_path)
    assert "could not be read, so none of its keys were kept" in printed and "not valid TOML" in printed
    assert (tmp_path / "c.toml.bak").read_text(encoding="utf-8") == "port = = 8123\n"
    assert "port" not in config_file.read(tmp_path / "c.toml")[0]


def test_an_alias_of_a_key_the_plan_decides_is_not_kept(tmp_path):
    """`conversation_cache_disk_mib` is another name of `conversation_cache_cold_mib` (docs/configuration.md):
    kept beside the plan's value, the server refused the file ('aliases set to different values')."""
    path = tmp_path / "c.toml"
    path.write_text('conversation_cache_spill_dir = "/srv/old-cold"\nconversation_cache_disk_mib = 7\nport = 8123\n',
                    encoding="utf-8")
    plan = _plan()
    config_file.write(plan, path)
    values, _ = config_file.read(path)
    assert "conversation_cache_disk_mib" not in values and "conversation_cache_spill_dir" not in values
    assert values["port"] == 8123
    loaded = server_config.load_config({}, config_path=path, environ={})
    assert loaded.values["conversation_cache_cold_mib"] == plan.config()["conversation_cache_cold_mib"]


def test_a_comment_of_several_lines_is_kept_whole(tmp_path):
    """A hand-set key's comment of two lines kept only its last ('do not change it without the plugin'), and a
    comment inside a table was taken for a top-level key of the same name."""
    path = tmp_path / "c.toml"
    path.write_text("# the port our editor's plugin expects:\n# do not change it without the plugin\nport = 8123\n"
                    "api_key = \"sk-1\"\n\n[extra]\n# not the top-level key's comment\napi_key = 1\n", encoding="utf-8")
    plan = _plan()
    config_file.write(plan, path)
    text = path.read_text(encoding="utf-8")
    assert "# the port our editor's plugin expects:\n# do not change it without the plugin\nport = 8123\n" in text
    _, reasons = config_file.read(path)
    assert reasons["port"] == "the port our editor's plugin expects:\ndo not change it without the plugin"
    assert "api_key" not in reasons
    config_file.write(plan, path)                                           # a third run: the same file again
    assert path.read_text(encoding="utf-8") == text
    shown = config_file.format_show(path)
    assert "# the port our editor's plugin expects:\n" in shown and shown.count("# do not change it") == 1


TABLES = """port = 8123

# policy variables tuned by hand
[env]
# slower disk here
STRATA_RESTORE_LADDER = "0"
STRATA_SLOT_TTL_MAX_S = 120   # protection of a 262144-token history; the curve scales with it
"""


def test_tables_are_kept_as_written_with_their_comments(tmp_path):
    """The [env] table was written anew by tomli_w: the comments in it (the one docs/install.md's example has
    after STRATA_SLOT_TTL_MAX_S, the one above an entry, the one above [env]) were lost on every re-run."""
    path = tmp_path / "c.toml"
    path.write_text(TABLES, encoding="utf-8")
    plan = _plan()
    config_file.write(plan, path)
    text = path.read_text(encoding="utf-8")
    assert TABLES.split("\n\n", 1)[1] in text
    values, _ = config_file.read(path)
    assert values["env"] == {"STRATA_RESTORE_LADDER": "0", "STRATA_SLOT_TTL_MAX_S": 120} and values["port"] == 8123
    config_file.write(plan, path)                                           # a third run: the same file again
    assert path.read_text(encoding="utf-8") == text
    loaded = server_config.load_config({}, config_path=path, environ={})
    assert loaded.env["STRATA_SLOT_TTL_MAX_S"] == "120"


def test_a_kept_keys_comment_after_it_stays(tmp_path):
    """`port = 8123  # the editor plugin's` lost its comment: the kept key was written anew by tomli_w."""
    path = tmp_path / "c.toml"
    path.write_text('port = 8123   # the editor plugin\'s\napi_key = "sk-1"  # rotated monthly\n', encoding="utf-8")
    plan = _plan()
    config_file.write(plan, path)
    text = path.read_text(encoding="utf-8")
    assert "\nport = 8123   # the editor plugin's\napi_key = \"sk-1\"  # rotated monthly\n" in text
    config_file.write(plan, path)
    assert path.read_text(encoding="utf-8") == text
    assert config_file.read(path)[0]["port"] == 8123


def test_a_warm_level_set_by_hand_survives_a_setup_run(tmp_path):
    """Setup never turns a warm level on (it needs a second, faster disk) and its plan writes the level off; its
    own comment says to set it by hand, and a re-run then lost that level to the `.bak`. Kept now, with the
    budget as it was, and the server reads it; without one set by hand, the plan's 'off' stands."""
    warm = tmp_path / "nvme-warm"
    (tmp_path / "c.toml").write_text(HAND_SET + "", encoding="utf-8")
    text = (tmp_path / "c.toml").read_text(encoding="utf-8")
    (tmp_path / "c.toml").write_text(text.replace(
        "[env]", f"conversation_cache_warm_dir = {str(warm)!r}\nconversation_cache_warm_mib = 4096\n\n[env]"),
        encoding="utf-8")
    out = run_setup(tmp_path)
    values, reasons = config_file.read(tmp_path / "c.toml")
    assert (values["conversation_cache_warm_dir"], values["conversation_cache_warm_mib"]) == (str(warm), 4096), out
    assert "set by hand" in reasons["conversation_cache_warm_dir"]
    assert "conversation_cache_warm_dir" in out and str(warm) in out        # the plan shown says so
    loaded = server_config.load_config({}, config_path=tmp_path / "c.toml", environ={})
    assert loaded.values["conversation_cache_warm_dir"] == str(warm) and loaded.values["port"] == 8123
    (tmp_path / "c.toml").write_text(HAND_SET, encoding="utf-8")
    run_setup(tmp_path)
    values, _ = config_file.read(tmp_path / "c.toml")
    assert (values["conversation_cache_warm_dir"], values["conversation_cache_warm_mib"]) == ("", 0)
