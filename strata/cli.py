"""The `strata` command: one subcommand per part, each implemented in its part's own module.

This file only dispatches; importing a part happens when its subcommand runs so that
`strata --version` and `strata models` stay fast and need neither Qt nor aiohttp.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from strata import __version__

# subcommand -> (module, one-line help). Each module has `add_arguments(parser)` and `run(args) -> int`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("strata.server.cli", "run the HTTP server (OpenAI and Anthropic APIs)"),
    "setup": ("strata.installer.cli", "guided setup: model, machine bench, slots, disk cache, context"),
    "monitor": ("strata.monitor.cli", "open the live monitor window on a running server"),
    "bench": ("strata.engine.bench", "measure prefill and decode speed of a model on this machine"),
    "replay": ("strata.server.replay.cli", "replay a request timeline through the slot policies"),
    "chat": ("strata.engine.chat", "chat with a model in the terminal"),
    "models": ("strata.engine.models", "list the GGUF models Strata can find"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="strata", description="Strata: a local model server for coding agents.")
    parser.add_argument("--version", action="version", version=f"strata {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module_name)
        # Parsers are filled lazily in main() for the chosen subcommand only.
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] in SUBCOMMANDS:
        name = argv[0]
        module = importlib.import_module(SUBCOMMANDS[name][0])
        sub = argparse.ArgumentParser(prog=f"strata {name}", description=SUBCOMMANDS[name][1])
        module.add_arguments(sub)
        args = sub.parse_args(argv[1:])
        try:
            return int(module.run(args) or 0)
        except BrokenPipeError:
            # The reader went away (`strata models | head -1`): stop quietly, as other commands do.
            # stdout is pointed at devnull so that the interpreter's final flush does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0
