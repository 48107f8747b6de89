"""Where Strata keeps its files unless told otherwise: one answer per platform for every part (the server, the
setup, the app, the model finder), so that they agree and docs/install.md's table can be checked against them.

platformdirs' folders under the name `strata` with no author folder: on Windows `%LOCALAPPDATA%\\strata\\...`
(with an author, platformdirs' default, the cache and the models went one level deeper, `strata\\strata\\`, while
the configuration and the logs did not). Linux and macOS have no author folder either way. Not here: folders a user
sets (`conversation_cache_*_dir`, `--log-dir`, `STRATA_CONFIG`), which the options that read them resolve."""

from __future__ import annotations

from pathlib import Path

import platformdirs
from platformdirs.api import PlatformDirsABC

APP_NAME = "strata"


def platform_dirs(rules: type[PlatformDirsABC] = platformdirs.PlatformDirs) -> PlatformDirsABC:
    """This platform's rules, or another platform's (`platformdirs.windows.Windows`: tests check the docs'
    Windows and macOS folders on Linux) for the functions below."""
    return rules(APP_NAME, appauthor=False)


def config_dir(dirs: PlatformDirsABC | None = None) -> Path:
    """`config.toml` (and its `.bak`): ~/.config/strata, %LOCALAPPDATA%\\strata, ..."""
    return Path((dirs or platform_dirs()).user_config_dir)


def cache_dir(dirs: PlatformDirsABC | None = None) -> Path:
    """The conversation cache's folders (conversations, system-prompts, segments, sessions)."""
    return Path((dirs or platform_dirs()).user_cache_dir)


def log_dir(dirs: PlatformDirsABC | None = None) -> Path:
    """The app's app.log and server.log."""
    return Path((dirs or platform_dirs()).user_log_dir)


def models_dir(dirs: PlatformDirsABC | None = None) -> Path:
    """Where the user's own GGUF files go (may not exist)."""
    return Path((dirs or platform_dirs()).user_data_dir) / "models"
