"""`strata setup`: the terminal wizard (questions, bench, plan, config file) and `--show`.

Asks the plan's questions in the plan's order (model, then the bench, one request or several,
conversations kept on disk and where, the context size), prints the plan with a reason for every
choice and writes the TOML file. `--yes`, or stdin closed or not a terminal, asks nothing and takes
every default; Enter takes one default; a bad answer is asked again with the reason. The decisions
are `plan.py`'s; this file is only terminal I/O.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import TextIO

from strata.installer import config_file, flow
from strata.installer.bench import run_machine_bench
from strata.installer.plan import QUESTION_ORDER, next_question, parse_answer
from strata.installer.plan_types import AnswerError, Answers, ModelRefused, Question, Situation
from strata.monitor.units import rate

from strata.exit_status import MODEL_NOT_LOADED

DISK_BENCH_MIB = 256           # the default size of the disk bench's file
MAX_DISK_BENCH_MIB = 16384   # the bench file is written whole before it is read back and deleted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", "-y", action="store_true",
                        help="ask nothing, take every default (also when stdin is not a terminal)")
    parser.add_argument("--config", metavar="PATH", type=Path, default=None,
                        help="where to write the configuration (default $STRATA_CONFIG, else "
                             f"{config_file.default_config_path()})")
    parser.add_argument("--show", action="store_true",
                        help="print the current configuration with reasons and check it as `strata serve` would "
                             "(exit status 2 or 3 when it would refuse it); takes --config only")
    parser.add_argument("--model", metavar="PATH", default=None, help="the GGUF model (skips the model question)")
    parser.add_argument("--cold-dir", metavar="PATH", default=None,
                        help="the folder proposed for conversations kept on disk "
                             f"(default {config_file.default_cold_dir()})")
    parser.add_argument("--fresh", action="store_true",
                        help="propose the recommended values, not the answers of the configuration file there "
                             "(its model and conversations' folder are still proposed)")
    parser.add_argument("--skip-bench", action="store_true", help="do not measure the machine")
    parser.add_argument("--disk-bench-mib", type=int, default=DISK_BENCH_MIB, metavar="N",
                        help="MiB written and read back to measure the cold folder (default 256, 8 to 16384)")


def setup_only_flags(args: argparse.Namespace) -> list[str]:
    """The flags given beside --show that only a setup reads: --show prints the file and writes nothing, so
    `strata setup --show --model M` printed the file there as if M had not been named."""
    given = {"--yes": getattr(args, "yes", False), "--model": getattr(args, "model", None) is not None,
             "--cold-dir": getattr(args, "cold_dir", None) is not None, "--fresh": getattr(args, "fresh", False),
             "--skip-bench": getattr(args, "skip_bench", False),
             "--disk-bench-mib": getattr(args, "disk_bench_mib", DISK_BENCH_MIB) != DISK_BENCH_MIB}
    return [flag for flag, on in given.items() if on]


def run(args: argparse.Namespace) -> int:
    if args.show and setup_only_flags(args):
        print(f"strata setup: {', '.join(setup_only_flags(args))}: not read with --show, which prints the "
              "configuration there and writes nothing (drop --show to run a setup with them)", file=sys.stderr)
        return 2
    if args.show:
        path = args.config or config_file.configured_path()
        try:
            print(config_file.format_show(path))
        except config_file.ConfigFileError as e:
            print(f"strata setup: {e}", file=sys.stderr)
            # a file there that cannot be read as TOML is one `strata serve` refuses with status 2 (it said 1);
            # no file there is nothing to check: 1
            return 2 if Path(path).expanduser().exists() else 1
        from strata.server.config import file_problems  # the checks `strata serve` makes of this file

        problems, status = file_problems(path), 2
        if not problems:                 # the keys are good: what serve checks next, before it listens
            problems, status = start_problems(path)
        if problems:
            print(f"problems: `strata serve` refuses this file (exit status {status}) until they are fixed:")
            for problem in problems:
                print(f"  {problem}")
            return status
        print("valid: `strata serve` accepts this file")
        note = config_file.earlier_setup_note(path)
        if note:
            print(f"note: {note}")
        return 0
    for flag, value in (("--model", getattr(args, "model", None)), ("--cold-dir", getattr(args, "cold_dir", None))):
        if value is not None and not value.strip():   # `--model "$MODEL"` with MODEL unset: asked, or the default
            print(f"strata setup: {flag}: empty (was it a variable that is not set?); give it a value, or leave it "
                  "out to be asked", file=sys.stderr)
            return 2
    if not 8 <= args.disk_bench_mib <= MAX_DISK_BENCH_MIB:   # 99999999999 wrote until the disk was full
        print(f"strata setup: --disk-bench-mib must be 8 to {MAX_DISK_BENCH_MIB}, got {args.disk_bench_mib}",
              file=sys.stderr)
        return 2
    try:
        return run_terminal(args, sys.stdin, sys.stdout)
    except SetupStopped as e:
        print(e.code, file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        print("\nstrata setup: cancelled, nothing written", file=sys.stderr)
        return 130


def start_problems(path: Path) -> tuple[list[str], int]:
    """What `strata serve --config PATH` would stop on before listening (the model, --backend, the memory check
    as this machine stands now) and its exit status, as --show lists it: a deepseek2 file with kv_type q8_0,
    or a model file since deleted, was called valid."""
    from strata.server.config import load_config
    from strata.server.preflight import preflight

    checked = preflight(load_config({}, config_path=path, environ={}))
    return ([checked.error] if checked.status else []), checked.status


def _interactive(stdin: TextIO | None) -> bool:
    try:
        return stdin is not None and not stdin.closed and stdin.isatty()
    except (ValueError, OSError):
        return False


def run_terminal(args: argparse.Namespace, stdin: TextIO | None, out: TextIO,
                 situation: Situation | None = None) -> int:
    """The whole wizard on text streams. `situation` replaces the measured machine (tests)."""
    ask = not args.yes and _interactive(stdin)
    target = Path(args.config).expanduser() if args.config else config_file.configured_path()
    try:
        if situation is None:   # a re-run proposes what the file there chose (--fresh: the recommendation)
            situation = flow.rerun_situation(target, args.cold_dir, args.model, getattr(args, "fresh", False))
        s = situation
    except OSError as e:
        print(f"strata setup: cannot read this machine's profile: {e}", file=sys.stderr)
        return 1
    m = s.machine
    gpu = f"GPU {m.gpu_name} ({m.gpu_vram_mib} MiB)" if m.gpu_name else "no NVIDIA GPU"
    print("Strata setup: the model, a short bench, one request or several, conversations on disk, "
          "the context size.", file=out)
    print(f"This machine: {m.n_cores} cores ({m.n_logical} logical), {m.ram_total_mib / 1024:.1f} GiB RAM "
          f"({m.ram_available_mib / 1024:.1f} GiB available), {gpu}.", file=out)
    if not ask:
        print("Taking every default (--yes or no terminal on stdin).", file=out)
    problem = config_file.write_problem(target)
    if problem:   # before the questions and the bench, which it would otherwise throw away
        print(f"strata setup: cannot write {target}: {problem} (pass another --config PATH)", file=sys.stderr)
        return 1
    a = Answers()
    state = {"ask": ask}
    while (q := next_question(s, a, QUESTION_ORDER)) is not None:
        s, a = _ask_until_valid(q, s, a, stdin, out, state, args)
        if q.key == "model" and not args.skip_bench:
            s = _bench(s, out, args.disk_bench_mib)
    before = target.read_bytes() if target.is_file() else None
    previous, _, unreadable = config_file.previous_file(target)
    try:
        plan, path = flow.finish(s, a, target)
    except OSError as e:
        print(f"strata setup: cannot write {target}: {e.strerror or e}", file=sys.stderr)
        return 1
    print("\nThe plan:", file=out)
    print("\n".join(flow.format_plan(plan)), file=out)
    print(f"\nWrote {path}", file=out)
    kept = config_file.carried_over(plan, previous)
    if kept:
        names = ", ".join(f"[{k}]" if isinstance(v, dict) else k for k, v in kept.items())
        print(f"Kept from the previous configuration (keys setup does not decide): {names}", file=out)
    if unreadable:
        print(f"The previous configuration could not be read, so none of its keys were kept: {unreadable}",
              file=out)
    if before is not None and before != path.read_bytes():
        print(f"The previous configuration is kept as {config_file.backup_path(path)}", file=out)
    print("Start the server with: "
          + start_hint(strata_command(), ["serve", *(["--config", str(path)] if args.config else [])]), file=out)
    return 0


def command_line(words: list[str], windows: bool | None = None) -> str:
    """`words` as a line to paste into this system's shell: a path with a space (C:\\Program Files\\Strata,
    "my configs/") quoted, as cmd.exe or a POSIX shell reads it back."""
    windows = os.name == "nt" if windows is None else windows
    return subprocess.list2cmdline(words) if windows else shlex.join(words)


def powershell_form(line: str, windows: bool | None = None) -> str | None:
    """On Windows, PowerShell's form of a cmd.exe `line` whose program is quoted (C:\\Program Files\\...), else
    None: PowerShell reads a line that starts with a quoted string as that string and refuses the next word
    ('Unexpected token'); its call operator `&` runs the program. An unquoted program runs in both as it is."""
    windows = os.name == "nt" if windows is None else windows
    return f"& {line}" if windows and line.startswith('"') else None


def start_hint(strata: str, words: list[str], windows: bool | None = None) -> str:
    """`strata` (as `strata_command` says it) and `words`, a line to paste into this system's shell; on
    Windows with PowerShell's form beside it where the two shells need different lines."""
    line = f"{strata} {command_line(words, windows)}"
    powershell = powershell_form(line, windows)
    return f"{line}   (in PowerShell: {powershell})" if powershell else line


def strata_command(on_path: str | None = None, argv0: str | None = None, frozen: bool | None = None,
                   executable: str | None = None) -> str:
    """How this user starts `strata`: in the packaged app its console `strata` beside the executable running
    (PyInstaller: sys.executable is the app, not a Python; the app's own `strata-app` is windowed on Windows,
    where a terminal would see none of its output), or that executable with `--strata-cli` in a folder
    without one; the bare name when it is on PATH, else this program's own path (a checkout's
    `.venv/bin/strata`, where a new user typed `strata serve` and got 'command not found')."""
    frozen = bool(getattr(sys, "frozen", False)) if frozen is None else frozen
    executable = sys.executable if executable is None else executable
    if frozen:
        console = Path(executable).with_name("strata" + Path(executable).suffix)   # the spec's CLI_NAME
        return command_line([str(console)] if console.is_file() else [executable, "--strata-cli"])
    on_path = shutil.which("strata") if on_path is None else on_path
    argv0 = sys.argv[0] if argv0 is None else argv0
    if on_path:
        return "strata"
    if Path(argv0).name == "strata":
        return command_line([str(Path(argv0).resolve())])
    beside = Path(argv0).with_name("strata" + Path(argv0).suffix)
    if Path(argv0).stem == "strata-app" and beside.is_file():
        # the app pip installed (`.venv/bin/strata-app`): its `strata` beside it, as README shows it, not
        # `.venv/bin/python -m strata` (said when the app found no display, a new-user trial)
        return command_line([str(beside.resolve())])
    return command_line([executable, "-m", "strata"])


class SetupStopped(SystemExit):
    """A refused answer with nobody to ask again (--yes, no terminal). Its code is the message, as SystemExit's
    prints it; `status` is what `run` exits with: a model file that cannot be used is strata serve's
    MODEL_NOT_LOADED (it was 1), anything else 1."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _ask_until_valid(q: Question, s: Situation, a: Answers, stdin: TextIO | None, out: TextIO,
                     state: dict, args: argparse.Namespace) -> tuple[Situation, Answers]:
    preset = args.model if q.key == "model" and args.model else None
    while True:
        if preset is not None:
            text = preset
        elif state["ask"]:
            text = _prompt(q, stdin, out)
            if text is None:  # end of input: every remaining question takes its default
                state["ask"] = False
                print("(end of input: taking the defaults)", file=out)
                text = ""
        else:
            text = ""
        try:
            value = parse_answer(q, text, s, a)
            s, a = flow.accept(s, a, q, value)
        except AnswerError as e:
            if not state["ask"]:
                hint = _flag_hint(q.key, args)
                raise SetupStopped(f"strata setup: {q.prompt} {e}{hint}",
                                   MODEL_NOT_LOADED if isinstance(e, ModelRefused) else 1) from None
            print(f"  ! {e}", file=out)
            preset = None
            continue
        if not state["ask"] and preset is None:
            print(f"{q.prompt} {q.default_text}  ({q.reason})", file=out)
        return s, a


def _prompt(q: Question, stdin: TextIO, out: TextIO) -> str | None:
    print(f"\n{q.prompt}", file=out)
    for i, option in enumerate(q.options if q.key == "model" else (), start=1):
        print(f"  {i}) {option}", file=out)
    if q.key == "model" and q.options:
        print("  type a number from the list or the path of a .gguf file", file=out)
    if q.default is not None:
        # the reason on a line of its own, as the wizard's "Why this default:": in brackets after the default it
        # nested three deep ("(the configuration there: ..., also the recommendation (16.0 GiB ... (a measured
        # case: ...)))") and the default itself was lost in it
        print(f"  default: {q.default_text}\n  why: {q.reason}", file=out)
    else:
        print(f"  ({q.reason})", file=out)
    hint = "/".join(q.options) if q.key in ("concurrency", "keep_on_disk") else ""
    shown = str(q.options.index(q.default) + 1) if q.key == "model" and q.default in q.options else q.default_text
    out.write(f"> {hint + ' ' if hint else ''}[{shown}] ")
    out.flush()
    line = stdin.readline()
    return None if line == "" else line.rstrip("\r\n")


def _bench(s: Situation, out: TextIO, disk_mib: int) -> Situation:
    print("\nMeasuring this machine (Ctrl-C skips the bench)...", file=out)
    skip = threading.Event()
    shown: dict[str, int] = {}

    def progress(stage: str, fraction: float, message: str) -> None:
        quarter = int(fraction * 4)  # one line per stage and quarter: readable in a log as on a terminal
        if shown.get(stage, -1) < quarter:
            shown[stage] = quarter
            print(f"  [{stage:<6}] {int(fraction * 100):3d}%  {message}", file=out)
            out.flush()

    try:
        report = run_machine_bench(s.model.path if s.model else None, s.cold_disk.folder,
                                   s.machine.n_cores, progress, skip, disk_mib=disk_mib)
    except KeyboardInterrupt:
        print("  bench skipped", file=out)
        return s
    b, d = report.bench, report.disk
    if b is not None:
        print(f"  model: prefill {rate(b.prefill_tps or 0)} tok/s, decode {rate(b.decode_tps or 0)} tok/s"
              + (f", load {b.load_s:.2f} s" if b.load_s else ""), file=out)
    if d.write_mib_s:
        print(f"  disk {d.folder}: write {rate(d.write_mib_s)} MiB/s, read {rate(d.read_mib_s)} MiB/s", file=out)
    print(f"  RAM: {report.ram_total_mib / 1024:.1f} GiB, {report.ram_available_mib / 1024:.1f} GiB available",
          file=out)
    for note in report.notes:
        print(f"  note: {note}", file=out)
    return flow.with_bench(s, report)


def _flag_hint(key: str, args: argparse.Namespace) -> str:
    """What to pass when a default taken without asking (--yes, no terminal) is refused: the model's flag, and
    the folder's (a refused --cold-dir stopped setup with no word of how to give another)."""
    if key == "model":
        return " (pass another --model PATH)" if args.model else " (pass --model PATH)"
    if key == "cold_dir":
        return " (pass another --cold-dir PATH)" if args.cold_dir else " (pass --cold-dir PATH)"
    return ""
