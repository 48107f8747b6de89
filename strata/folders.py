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


# A folder Strata makes for conversations (cache levels, segments, system prompts, sessions) is its user's alone, and
# so is each file it writes there: a history's token ids are its text (the code and files an agent read, a secret in
# one), readable by anyone who has the tokenizer. 0700 is what the XDG base directory spec asks of a folder an
# application makes; umask may only take more away. A folder that already exists keeps its mode (one a user made).
PRIVATE_FOLDER_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
