"""Windows paths in config.toml: what `strata setup` writes reads back as the same path (backslashes escaped), and a
hand-typed path in double quotes, whose backslashes TOML takes for escapes, stops `strata serve` and `strata setup
--show` with a message saying how to write it, instead of "Invalid hex value" or, for `"C:\\temp"`, a folder
named `C:<tab>emp` used silently. Not here: the folders themselves (tests/cli/test_docs_uninstall.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from strata.installer import config_file
from strata.server.config import ConfigError, load_config

from strata.toml_paths import HINT
from tests.installer.test_config_file import _plan

WINDOWS_MODEL = "C:\\Users\\Дима\\models\\m.gguf"
WINDOWS_DIR = "\\\\?\\D:\\strata\\new\\cache"      # a long-path prefix, and \n that must stay two characters


def test_a_windows_path_written_by_setup_reads_back_as_written(tmp_path):
    plan = _plan()
    windows = {"model": WINDOWS_MODEL, "conversation_cache_cold_dir": WINDOWS_DIR}
    assert set(windows) <= {c.key for c in plan.choices}
    plan = replace(plan, choices=tuple(replace(c, value=windows.get(c.key, c.value)) for c in plan.choices))
    path = config_file.write(plan, tmp_path / "config.toml")
    values, _ = config_file.read(path)
    assert (values["model"], values["conversation_cache_cold_dir"]) == (WINDOWS_MODEL, WINDOWS_DIR)
    config = load_config(config_path=path, environ={})
    assert (config.model, config.conversation_cache_cold_dir) == (WINDOWS_MODEL, WINDOWS_DIR)


@pytest.mark.parametrize("line,says", [
    ('model = "C:\\Users\\me\\m.gguf"', "Invalid hex value"),               # \U: a code point
    ('conversation_cache_cold_dir = "D:\\strata\\cache"', "Unescaped '\\'"),
    ('conversation_cache_cold_dir = "C:\\temp"', "conversation_cache_cold_dir: TOML read a backslash"),   # a tab
    ('model = "D:\\new.gguf"', "model: TOML read a backslash in 'D:\\new.gguf'"),                      # a newline
])
def test_a_hand_typed_windows_path_in_double_quotes_says_how_to_write_it(tmp_path, line, says):
    path = tmp_path / "config.toml"
    path.write_text(f"ctx = 4096\n{line}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as served:
        load_config(config_path=path, environ={})
    with pytest.raises(config_file.ConfigFileError) as shown:
        config_file.read(path)
    for message in (str(served.value), str(shown.value)):
        assert says in message and message.endswith(HINT), message


@pytest.mark.parametrize("line", ["model = 'C:\\Users\\me\\m.gguf'", 'model = "C:\\\\Users\\\\me\\\\m.gguf"'])
def test_both_spellings_the_hint_gives_read_as_the_path(tmp_path, line):
    path = tmp_path / "config.toml"
    path.write_text(line + "\n", encoding="utf-8")
    assert load_config(config_path=path, environ={}).model == "C:\\Users\\me\\m.gguf"

