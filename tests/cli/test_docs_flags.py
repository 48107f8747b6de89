"""docs/configuration.md lists every flag of every command with its default as the code has it: `strata
serve`'s options and the conversation cache's (flag, TOML key, default), and each other command's flags
(`strata setup`, `monitor`, `bench`, `replay`, `chat`, `models` and `strata-app`) in a table under its own
heading. It listed serve's only, and nothing checked a default against the code. Not here: the
environment variables (test_docs_variables.py) or what each flag does (each part's tests)."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from strata.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
ROW = re.compile(r"^\| (`-[^|]*) \| ([^|]*) \|", re.M)   # | `--flag` (`key`) / `-f` | default | what |

# Serve options whose default the code leaves unset and decides later; the doc says what it becomes.
DECIDED_LATER = {"lookup-draft": "8; 0 for a model with experts",
                 "conversation-cache-cold-dir": "`<platform cache folder>/conversations`"}


def serve_default(value) -> str:
    if value is None:
        return "(none)"
    if value == "":
        return "(empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def rows(text: str) -> dict[str, str]:
    """flag -> its default cell, for every table row that starts with flags."""
    found = {}
    for flags, default in ROW.findall(text):
        for flag in re.findall(r"`(-[-\w]*)`", flags):
            found[flag] = default.strip()
    return found


def test_every_serve_and_cache_option_has_its_default_from_the_code():
    from strata.server.config import all_options

    table = rows(DOC.split("\n## The other commands")[0])
    wrong = {}
    for option in all_options():
        documented = table.get(f"--{option.name}")
        expected = DECIDED_LATER.get(option.name, serve_default(option.default))
        if documented != expected:
            wrong[option.name] = (documented, expected)
    assert not wrong, f"docs/configuration.md default (documented, code): {wrong}"


PROGRAMS = [f"strata {name}" for name in SUBCOMMANDS if name != "serve"] + ["strata-app"]


def parser_of(prog: str) -> argparse.ArgumentParser:
    """Built when asked: a default may come from the environment (monitor's --url from STRATA_URL)."""
    if prog == "strata-app":
        from strata.app.main import build_parser

        return build_parser()
    parser = argparse.ArgumentParser(prog=prog)
    importlib.import_module(SUBCOMMANDS[prog.split()[1]][0]).add_arguments(parser)
    return parser


def command_default(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "(none)" if value is None or value == [] else str(value)


def section(prog: str) -> str:
    parts = re.split(r"^### ", DOC, flags=re.M)
    mine = [p for p in parts if p.startswith(f"`{prog}`\n")]
    assert mine, f"docs/configuration.md has no '### `{prog}`' section"
    return mine[0]


@pytest.mark.parametrize("prog", PROGRAMS)
def test_every_flag_of_the_other_commands_is_listed_with_its_default(monkeypatch, prog):
    monkeypatch.delenv("STRATA_URL", raising=False)
    parser = parser_of(prog)
    table = rows(section(prog))
    wrong = {}
    for action in parser._actions:
        for flag in action.option_strings:
            if flag in ("-h", "--help"):
                continue
            documented = table.get(flag)
            # the cell may go on to say what an unset value means: "(none): the default model"
            if documented is None or not re.match(re.escape(command_default(action.default)) + r"($|[ :])",
                                                  documented):
                wrong[flag] = (documented, command_default(action.default))
    assert not wrong, f"{prog}: docs/configuration.md default (documented, code): {wrong}"


def test_serve_flags_beyond_the_tables_are_named():
    """--config, --no-config and the --no-X of each on/off option are in the text, not in a table row."""
    parser = argparse.ArgumentParser()
    importlib.import_module(SUBCOMMANDS["serve"][0]).add_arguments(parser)
    named = set(re.findall(r"`(--[-\w]+)", DOC))
    missing = sorted(f for a in parser._actions for f in a.option_strings
                     if f.startswith("--") and f != "--help" and f not in named)
    assert not missing, f"strata serve flags not in docs/configuration.md: {missing}"


def test_the_strata_commands_own_flags_are_named():
    """`strata --version` (the command's own flag, before any subcommand) was in no table: docs/app.md named it in
    passing, about the Windows build (found in session 40's docs trial)."""
    from strata.cli import build_parser

    named = set(re.findall(r"`strata (--[-\w]+)`", DOC))
    missing = sorted(f for a in build_parser()._actions for f in a.option_strings
                     if f.startswith("--") and f != "--help" and f not in named)
    assert not missing, f"`strata` flags not in docs/configuration.md: {missing}"
