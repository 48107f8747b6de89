"""The `strata` command: one subcommand per part, each implemented in its part's own module.

This file only dispatches, and turns three kinds of user mistake into one short message instead of a usage
dump, a traceback or an abort: an option the command does not have (with the option meant, when it can
tell), a file or folder the command cannot use, and a window command where there is no display.
Importing a part happens when its subcommand runs so that
`strata --version` and `strata models` stay fast and need neither Qt nor aiohttp.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping
from typing import NoReturn

from strata import __version__, token_counts
from strata.standard_streams import standard_streams_as_utf8

# subcommand -> (module, one-line help). Each module has `add_arguments(parser)` and `run(args) -> int`;
# it may also have `FLAG_SYNONYMS` ({"--other-servers-name": "--ours"}) for the "did you mean" hint, and
# `FLAG_REASONS` ({"--other-servers-flag": "not needed here: ..."}) for flags with no counterpart.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("strata.server.cli", "run the HTTP server (OpenAI and Anthropic APIs)"),
    "setup": ("strata.installer.cli", "guided setup: model, machine bench, slots, disk cache, context"),
    "monitor": ("strata.monitor.cli", "open the live monitor window on a running server"),
    "bench": ("strata.engine.bench", "measure prefill and decode speed of a model on this machine"),
    "replay": ("strata.server.replay.cli", "replay a request timeline through the slot policies"),
    "chat": ("strata.engine.chat", "chat with a model in the terminal"),
    "models": ("strata.engine.models", "list the GGUF models Strata can find"),
}


class CommandParser(argparse.ArgumentParser):
    """An argparse parser whose errors are two lines: what is wrong (with the option meant, for an
    unknown one) and where the options are listed; not the whole usage, which for `strata serve` is
    thirty lines that bury the one that matters."""

    def __init__(self, *args, synonyms: Mapping[str, str] | None = None,
                 reasons: Mapping[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.synonyms = dict(synonyms or {})
        self.reasons = dict(reasons or {})

    def error(self, message: str) -> NoReturn:
        hints = ""
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            for word in message[len(prefix):].split():
                meant = self.option_meant(word)
                if word.split("=", 1)[0] in self.reasons:   # another server's flag for what this one always does
                    hints += f"\n  {word.split('=', 1)[0]}: {self.reasons[word.split('=', 1)[0]]}"
                elif meant:
                    hints += f"\n  {word.split('=', 1)[0]}: did you mean {meant}?"
                elif word.lower().endswith(".gguf") and any("--model" in a.option_strings for a in self._actions):
                    hints += f"\n  {word}: did you mean --model {word}?"   # `llama-server`/`ollama` habits
        glued = re.match(r"argument -h/--help: ignored explicit argument '([^']*)'", message)
        if glued and "-h" + glued.group(1) in self.reasons:   # llama-server's -hf, read by argparse as -h f
            hints += f"\n  -h{glued.group(1)}: {self.reasons['-h' + glued.group(1)]}"
        missing = re.match(r"argument ([^:]+): expected one argument", message)
        if missing and self.takes_tokens(missing.group(1)):   # `--ctx -5k` reads -5k as a flag: no value given
            hints += f"\n  {missing.group(1)}: {token_counts.TAKES}"
        given = re.match(r"argument ([^:]+): ignored explicit argument '", message)
        switch = self.switch_named(given.group(1)) if given else None
        if switch:
            hints += f"\n  {self.switch_hint(switch)}"
        choice = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
        if choice:
            meant = name_meant(choice.group(1), SUBCOMMANDS, cutoff=0.6)
            if meant:
                hints += f"\n  {choice.group(1)}: did you mean {meant}?"
        self.exit(2, f"{self.prog}: error: {message}{hints}\n`{self.prog} --help` lists every option\n")

    def switch_named(self, name: str) -> argparse.Action | None:
        """The on/off flag argparse names `name` ('--memory-check', '--yes/-y') in its errors, or None."""
        for action in self._actions:
            if "/".join(action.option_strings) == name and isinstance(
                    action, (argparse._StoreConstAction, argparse.BooleanOptionalAction)):
                return action
        return None

    def takes_tokens(self, name: str) -> bool:
        """Whether the flag argparse names `name` takes a number of tokens (--ctx, --slot-ctx)."""
        return any("/".join(a.option_strings) == name and a.metavar == token_counts.METAVAR for a in self._actions)

    def switch_hint(self, switch: argparse.Action) -> str:
        """How to give an on/off flag that was given a value (--memory-check=no): the flag alone, or its --no- twin."""
        flag = next(s for s in switch.option_strings if s.startswith("--"))
        known = {s for action in self._actions for s in action.option_strings if self.switch_named(s)}
        twin = flag.replace("--no-", "--", 1) if flag.startswith("--no-") else "--no-" + flag[2:]
        if twin in known:
            on, off = (twin, flag) if flag.startswith("--no-") else (flag, twin)
            return f"{flag} takes no value: give {on} to turn it on, {off} to turn it off"
        return f"{flag} takes no value: give {flag} alone, or leave it out"

    def option_meant(self, word: str) -> str | None:
        """The option a mistyped or foreign `word` most likely stands for, or None (not an option)."""
        if not word.startswith("-"):
            return None
        known = (s for action in self._actions for s in action.option_strings if s.startswith("--"))
        return name_meant(word.split("=", 1)[0], known, self.synonyms, cutoff=0.7)


def name_meant(name: str, known: Iterable[str], synonyms: Mapping[str, str] | None = None,
               cutoff: float = 0.7) -> str | None:
    """The known name a mistyped or foreign `name` most likely stands for (another program's spelling
    from `synonyms` first, else the closest known one), or None."""
    if synonyms and name in synonyms:
        return synonyms[name]
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=cutoff)
    return close[0] if close else None


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="strata", description="Strata: a local model server for coding agents.")
    parser.add_argument("--version", action="version", version=f"strata {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module_name)
        # Parsers are filled lazily in main() for the chosen subcommand only.
    return parser


WINDOWED = ("monitor",)   # subcommands that open a Qt window


HEADLESS = "no display to open a window on (DISPLAY and WAYLAND_DISPLAY are unset, as over SSH)"


def headless(environ: Mapping[str, str], platform: str) -> bool:
    """Whether a Qt window cannot open here: Linux without DISPLAY or WAYLAND_DISPLAY (an SSH session, a
    server) and no QT_QPA_PLATFORM, where Qt aborts the process (SIGABRT) advising a reinstall."""
    return platform.startswith("linux") and not any(environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY",
                                                                              "QT_QPA_PLATFORM"))


def no_display(environ: Mapping[str, str], platform: str) -> str | None:
    """Why the monitor's window cannot open here, with what to do instead; None where it can."""
    if not headless(environ, platform):
        return None
    return (f"{HEADLESS}: run it on a desktop with --url pointing at the server, or save a picture with "
            "--screenshot PATH; GET /v1/monitor gives the same figures as JSON")


def file_problem(error: OSError) -> str:
    """An OSError about a file as a user reads it: the path and what is wrong with it."""
    reason = error.strerror or str(error)
    return f"{error.filename}: {reason}" if error.filename else reason


def main(argv: list[str] | None = None) -> int:
    standard_streams_as_utf8()
    try:
        return run_command(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        # Ctrl-C before a command set up its own handling (importing aiohttp and the engine takes a second or
        # two on a busy machine): stop as the shell expects, not with thirty lines of import frames.
        drop_half_built_quietly()
        print(file=sys.stderr)
        return 130


def drop_half_built_quietly() -> None:
    """After a Ctrl-C that cut start-up short: objects it left half-built (asyncio.run's event loop, the
    coroutine it never started) are reported as they are collected ('Exception ignored in ... __del__',
    'never awaited', with frames). The process is ending and nothing was served, so say nothing of them."""
    sys.unraisablehook = lambda unraisable: None
    warnings.simplefilter("ignore", RuntimeWarning)


def run_command(argv: list[str]) -> int:
    parser = build_parser()
    if argv and argv[0] in SUBCOMMANDS:
        name = argv[0]
        module = importlib.import_module(SUBCOMMANDS[name][0])
        sub = CommandParser(prog=f"strata {name}", description=SUBCOMMANDS[name][1],
                            synonyms=getattr(module, "FLAG_SYNONYMS", None),
                            reasons=getattr(module, "FLAG_REASONS", None))
        module.add_arguments(sub)
        args = sub.parse_args(argv[1:])
        if name in WINDOWED and no_display(os.environ, sys.platform):
            if not getattr(args, "screenshot", None):
                print(f"strata {name}: {no_display(os.environ, sys.platform)}", file=sys.stderr)
                return 2
            os.environ["QT_QPA_PLATFORM"] = "offscreen"     # a screenshot needs no screen
        try:
            return int(module.run(args) or 0)
        except BrokenPipeError:
            # The reader went away (`strata models | head -1`): stop quietly, as other commands do.
            # stdout is pointed at devnull so that the interpreter's final flush does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except OSError as e:
            # A path the command was given cannot be used (a missing folder, no permission, a full disk)
            # and the command did not say so itself: one line naming it, not a traceback.
            print(f"strata {name}: {file_problem(e)}", file=sys.stderr)
            return 1
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0
