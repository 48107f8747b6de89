"""Where the server's model file is, as the app can tell before it starts the server: the configuration
read as `strata serve` reads it (the file, then STRATA_* variables, then the app's extra serve flags), and
a look at that path. The decision whether to wait for it is restart_policy.wait_for_model's.

Not here: resolving an id (`strata serve` does that, and says what it could not find), or judging the
file's contents (the server's preflight: a damaged file stops it with status 3, which is not retried).
"""

from __future__ import annotations

import argparse
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from strata.app.restart_policy import ModelFile, names_a_path

from strata.model_names import names_default_model_file

if TYPE_CHECKING:
    from strata.server.config import ServerConfig


def configured(config_path: Path | None, serve_args: tuple[str, ...] | list[str],
               environ: Mapping[str, str]) -> ServerConfig | None:
    """The server's configuration as `strata serve` will read it (the app's serve flags over STRATA_* variables
    over the file), or None: a configuration the server will refuse itself (exit status 2, with a better message
    than the app could give)."""
    from strata.server.cli import add_arguments
    from strata.server.config import ConfigError, config_from_args

    parser = _QuietParser(add_help=False, exit_on_error=False)
    add_arguments(parser)
    argv = (["--config", str(config_path)] if config_path else []) + list(serve_args)
    try:
        args, _ = parser.parse_known_args(argv)
        return config_from_args(args, environ=environ)
    except (ConfigError, argparse.ArgumentError, ValueError, OSError):
        return None


def configured_model(config_path: Path | None, serve_args: tuple[str, ...] | list[str],
                     environ: Mapping[str, str]) -> str | None:
    """The configuration's `model` (a path or an id), or None: the default model, or a refused configuration."""
    config = configured(config_path, serve_args, environ)
    return config.model or None if config is not None else None


def configured_key(config_path: Path | None, serve_args: tuple[str, ...] | list[str],
                   environ: Mapping[str, str]) -> str | None:
    """The API key the server will ask for (its monitor feed's: the app's window, its stop's wording): the
    app's `--api-key` flag over STRATA_API_KEY over the file's api_key; None: none, or a refused configuration."""
    config = configured(config_path, serve_args, environ)
    return config.api_key or None if config is not None else None


def look_for_configured_model(config_path: Path | None, serve_args: tuple[str, ...],
                              environ: Mapping[str, str]) -> ModelFile:
    """The supervisor's probe: the configuration read again at each look (one changed while the app waits
    counts), then a look at its model."""
    return look(configured_model(config_path, serve_args, environ))


class _QuietParser(argparse.ArgumentParser):
    """Raises where argparse would print its complaint and exit: the server says it better, and this runs on
    the supervisor's thread, where neither stderr (swapping it is process-wide) nor SystemExit belongs."""

    def error(self, message: str):
        raise argparse.ArgumentError(None, message)


def look(model: str | None) -> ModelFile:
    """What is at `model` now: one stat(), and one more for a missing file's folder."""
    if model is None or not names_a_path(model):
        return ModelFile(None)
    path = Path(model).expanduser()
    try:
        st = path.stat()
    except OSError:        # not there, or its drive not reachable
        if names_default_model_file(model):   # an older setup's path to the default model: serve takes the one here
            return ModelFile(None)
        return ModelFile(model, "missing", path.parent.is_dir())
    if stat.S_ISDIR(st.st_mode):
        return ModelFile(model, "folder", True)
    return ModelFile(model, "file", True, (st.st_size, st.st_mtime_ns, st.st_ino))
