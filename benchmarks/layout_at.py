"""`strata serve` with a code completion's prompt laid out as at another commit: server/fim_prompt.py as that commit
has it (`git show`), everything else this tree's. For A/B trials of the layout alone in one tree (fim_beside_agent's
--layout-at), where other teammates change the rest of the tree meanwhile.

    .venv/bin/python benchmarks/layout_at.py COMMIT serve --model ... (strata's own arguments)
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "strata.server.fim_prompt"


def load_layout(commit: str) -> types.ModuleType:
    """fim_prompt.py as at `commit`, in place of this tree's: the modules that import it afterwards get that one."""
    src = subprocess.check_output(["git", "show", f"{commit}:server/fim_prompt.py"], cwd=ROOT)
    import strata.server  # noqa: F401  (the package first: its finder maps strata.server to server/)

    module = types.ModuleType(NAME)
    module.__file__ = f"{commit}:server/fim_prompt.py"
    sys.modules[NAME] = module          # before exec: its dataclasses look their module up
    exec(compile(src, module.__file__, "exec"), module.__dict__)
    return module


def main() -> int:
    if len(sys.argv) < 2:
        sys.exit("usage: layout_at.py COMMIT serve ...")
    load_layout(sys.argv[1])
    from strata.cli import main as strata_main

    sys.argv = ["strata", *sys.argv[2:]]
    return strata_main()


if __name__ == "__main__":
    sys.exit(main())
