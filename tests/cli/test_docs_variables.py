"""docs/configuration.md promises every environment variable: each `STRATA_*` name the programs read
(the Python parts, the engine's getenv calls, the ./run and ./test scripts) is listed there, the slot
policy's `STRATA_SLOT_*` thresholds in docs/slot-policy.md, which configuration.md points to; and so is each
variable of the system the Python parts read by name (`DISPLAY`, `USERDOMAIN`, ...). Not here: what each
variable does (each part's tests)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON_PARTS = ("app", "server", "strata", "installer", "monitor", "engine_native/engine")
QUOTED_NAME = re.compile(r"""["'](STRATA_[A-Z0-9_]*[A-Z0-9])["']""")     # a name in a string literal
GETENV_NAME = re.compile(r"""getenv\("(STRATA_[A-Z0-9_]+)"\)""")          # the engine's C++ reads
SHELL_NAME = re.compile(r"""\$\{(STRATA_[A-Z0-9_]+)""")                   # ${STRATA_X:-...} in scripts
# any other name read from the environment: environ.get("X"), environ["X"], getenv("X"), and a loop over names,
# `environ.get(v) for v in ("DISPLAY", ...)`
READ_NAME = re.compile(r"""(?:environ(?:\.get)?\s*[(\[]|getenv\()\s*["']([A-Z][A-Z0-9_]*)["']""")
LOOP_NAMES = re.compile(r"""environ\.get\((\w+)\) for \1 in \(([^)]*)\)""")


def variables_read() -> set[str]:
    names: set[str] = set()
    for part in PYTHON_PARTS:
        for path in (ROOT / part).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            names.update(QUOTED_NAME.findall(text), READ_NAME.findall(text))
            for _, listed in LOOP_NAMES.findall(text):
                names.update(re.findall(r"""["']([A-Z][A-Z0-9_]*)["']""", listed))
    for path in (ROOT / "engine_native").rglob("*"):
        if path.suffix in (".cpp", ".cu", ".h", ".cuh"):
            names.update(GETENV_NAME.findall(path.read_text(encoding="utf-8", errors="replace")))
    for path in (ROOT / "run", ROOT / "test", *(ROOT / "scripts").iterdir()):
        if path.is_file():
            names.update(SHELL_NAME.findall(path.read_text(encoding="utf-8", errors="replace")))
    return names


def test_the_scan_finds_variables_of_each_kind():
    names = variables_read()
    assert {"STRATA_API_KEY", "STRATA_SLOT_TTL_MAX_S"} <= names     # Python
    assert "STRATA_CUDA_GRAPHS" in names                            # the engine's getenv
    assert "STRATA_PYTHON" in names                                 # scripts/ensure-venv
    assert {"USERDOMAIN", "WAYLAND_DISPLAY"} <= names               # the system's, by name and in a loop


def test_every_variable_read_is_in_the_configuration_reference():
    configuration = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    slot_policy = (ROOT / "docs" / "slot-policy.md").read_text(encoding="utf-8")
    missing = sorted(n for n in variables_read()
                     if f"`{n}`" not in configuration
                     and not (n.startswith("STRATA_SLOT_") and f"`{n}`" in slot_policy))
    assert missing == [], f"not in docs/configuration.md: {missing}"
