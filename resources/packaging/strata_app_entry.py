"""Entry script of the packaged app (PyInstaller): `strata-app`, and `strata-app --strata-cli ...`
for the processes the app starts (its server, the setup wizard's bench).

Such a child that meets an error nothing caught writes its traceback to its standard error (the app's pipe: its
log, the bench's refusal) and exits with UNCAUGHT_ERROR. Let out of this script, the error would reach
PyInstaller's bootloader, which on a windowed executable opens a modal dialog with it (whatever
disable_windowed_traceback says: that flag only leaves the traceback out of it) and waits for a click nobody
gives, the child started hidden, and the app would wait on the child for ever. The app's own errors still go
there: the user is at that window (strata.spec keeps the traceback in it for the report)."""

import multiprocessing
import sys

CHILD_FLAG = "--strata-cli"   # strata.app.main, app/supervisor.py, installer/bench.py start the app's children so
UNCAUGHT_ERROR = 1            # what Python exits with for an uncaught error (the supervisor restarts a server so)


def run_child(argv: list[str]) -> int:
    """`strata ARGS...` as the app's child: its status, or UNCAUGHT_ERROR with the traceback on standard error
    (none where it has none) for any error it lets out; SystemExit goes through (argparse's status 2)."""
    try:
        # first: a traceback of strata.cli's own imports reaches the app's pipe in UTF-8, as it reads it (strata.cli
        # sees to that itself, but only once its imports are done; before, it was the ANSI code page's on Windows)
        from strata.standard_streams import output_as_utf8

        output_as_utf8((sys.stdout, sys.stderr))
        from strata.cli import main

        return main(argv)
    except SystemExit:
        raise
    except BaseException:       # an import the bundle lacks included (a spec missing a hidden import)
        import traceback

        if sys.stderr is not None:
            try:
                traceback.print_exc(file=sys.stderr)
                sys.stderr.flush()
            except (OSError, ValueError):   # the app closed its end: the status still says it
                pass
        return UNCAUGHT_ERROR


if __name__ == "__main__":
    multiprocessing.freeze_support()
    if sys.argv[1:2] == [CHILD_FLAG]:
        sys.exit(run_child(sys.argv[2:]))
    from strata.app.main import main

    sys.exit(main())
