"""The PyInstaller spec against the code it packages, without a build (benchmarks/build_app.py builds it):
a module imported by name, a data file loaded at run time or a package folder the spec does not know
shows up in the app only when that path runs; a test-only package it does not exclude is shipped.
The spec's lists are read from its text (it runs only under PyInstaller)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "resources" / "packaging" / "strata.spec"
# files in the package folders the app does not load at run time
NOT_LOADED = {
    "strata.desktop": "the Linux menu entry of an installed strata-app (docs/install.md)",
    "__init__.pyi": "the engine module's type stubs, for editors",
}


def spec_constant(name: str):
    for node in ast.parse(SPEC.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"strata.spec has no constant {name}")


def wheel_packages() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["scikit-build"]["wheel"]["packages"]


def product_files() -> list[Path]:
    """The packaged code: the folders pyproject maps into `strata`, less tests and the packaging itself."""
    files = []
    for source in wheel_packages().values():
        for path in (ROOT / source).rglob("*.py"):
            rel = path.relative_to(ROOT).parts
            if "tests" not in rel and "packaging" not in rel and "__pycache__" not in rel:
                files.append(path)
    return sorted(set(files))


def trees() -> list[tuple[Path, ast.AST]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in product_files()]


def test_the_spec_stages_the_folders_pyproject_maps_into_the_package():
    assert spec_constant("PACKAGES") == wheel_packages()


def test_every_data_file_in_the_package_folders_is_bundled_or_known_not_loaded():
    bundled = set(spec_constant("RESOURCE_FILES"))
    data = set()
    for source in wheel_packages().values():
        for path in (ROOT / source).rglob("*"):
            rel = path.relative_to(ROOT).parts
            if (path.is_file() and path.suffix not in (".py", ".pyc", ".so", ".pyd")
                    and not {"tests", "packaging", "__pycache__"} & set(rel)):
                data.add(path.name)
    assert data - bundled - set(NOT_LOADED) == set(), "a data file neither in RESOURCE_FILES nor in NOT_LOADED"
    assert bundled <= data, "RESOURCE_FILES names a file that is not there"
    # a file the code names (Path(__file__)... / "resources" / "strata.png") is one the spec bundles
    named = {node.value for _, tree in trees() for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in data}
    assert named - bundled == set()


def test_modules_imported_by_name_are_in_the_bundle():
    """The spec bundles every module of the package (its hidden imports); a name given to import_module /
    find_spec, or a `strata` subcommand's module, must be one of them or named in the spec itself."""
    spec_text = SPEC.read_text(encoding="utf-8")
    modules = set()
    for source_root, target in ((ROOT / s, t) for t, s in wheel_packages().items()):
        for path in source_root.rglob("*.py"):
            parts = path.relative_to(source_root).with_suffix("").parts
            modules.add(".".join((*target.split("/"), *(parts[:-1] if parts[-1] == "__init__" else parts))))
    by_name = set()
    for _, tree in trees():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("import_module", "find_spec") and node.args
                    and isinstance(node.args[0], ast.Constant)):
                by_name.add(node.args[0].value)
    from strata.cli import SUBCOMMANDS

    by_name |= {module for module, _ in SUBCOMMANDS.values()}
    assert {"strata.server.cache.options", "strata.server.cli"} <= by_name      # the scan finds them
    missing = {m for m in by_name if m not in modules and f'"{m}"' not in spec_text}
    assert missing == set()


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_test_only_packages_are_excluded_and_nothing_the_app_imports_is():
    excludes = set(spec_constant("EXCLUDES"))
    imported = set()
    for _, tree in trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    assert {"numpy", "aiohttp", "PySide6", "jinja2"} <= imported                    # the scan finds them
    assert imported & excludes == set(), "the spec excludes a package the app imports"

    with open(ROOT / "pyproject.toml", "rb") as f:
        dev = {canonical(re.split(r"[<>=!~;\[ ]", req)[0])
               for req in tomllib.load(f)["project"]["optional-dependencies"]["dev"]}
    dev_modules = {module for module, dists in importlib.metadata.packages_distributions().items()
                   if {canonical(d) for d in dists} & dev and not module.startswith("_")}
    assert {"pytest", "openai", "mistral_common"} <= dev_modules                  # installed here (the dev extra)
    assert dev_modules - imported - excludes == set(), "a test-only package the spec does not exclude"


def spec_calls(name: str) -> list[ast.Call]:
    tree = ast.parse(SPEC.read_text(encoding="utf-8"))
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name]


def entry_target(script: str) -> str:
    """`module:main` as the entry script runs it (`from module import main`)."""
    tree = ast.parse((SPEC.parent / script).read_text(encoding="utf-8"))
    return next(f"{node.module}:main" for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and any(a.name == "main" for a in node.names))


def test_the_bundle_has_the_commands_pip_installs_a_console_strata_and_a_windowed_strata_app(tmp_path):
    """A windowed executable started from cmd.exe / PowerShell has no console: its output goes nowhere and
    the shell does not wait, so `Strata.exe --strata-cli serve` was no command line for Windows. The one
    folder holds both of pyproject's commands, built as pip builds them: `strata` a console executable,
    `strata-app` a windowed one, each running the same function, in one COLLECT (one _internal, not two)
    and with names that are two files where names ignore case (Windows, macOS)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    console_scripts, gui_scripts = project["scripts"], project["gui-scripts"]
    entries = {}
    tree = ast.parse(SPEC.read_text(encoding="utf-8"))
    for node in tree.body:                                 # app = analysis("strata_app_entry.py")
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "analysis"):
            entries[node.targets[0].id] = node.value.args[0].value
    constants = {name: spec_constant(name) for name in ("APP_NAME", "CLI_NAME")}
    (collect,) = spec_calls("COLLECT")
    built = {}
    for arg in collect.args:                               # executable(app, APP_NAME, console=False)
        if isinstance(arg, ast.Call) and arg.func.id == "executable":
            name = constants[arg.args[1].id]
            console = next(k.value.value for k in arg.keywords if k.arg == "console")
            built[name] = (entry_target(entries[arg.args[0].id]), console)
    assert built == {**{n: (t, True) for n, t in console_scripts.items()},
                     **{n: (t, False) for n, t in gui_scripts.items()}}
    assert len({name.lower() for name in built}) == len(built)
    # the binaries and data of both analyses go into the one folder
    names = {a.value.id for a in collect.args if isinstance(a, ast.Attribute)}
    assert names == set(entries) and {a.attr for a in collect.args if isinstance(a, ast.Attribute)} == \
        {"binaries", "datas"}

    # what the app and setup tell the user to type names the console one (installer.cli.strata_command)
    from strata.installer.cli import strata_command

    for name in built:
        (tmp_path / name).write_bytes(b"")
    for name in built:
        assert strata_command(frozen=True, executable=str(tmp_path / name)) == \
            str(tmp_path / constants["CLI_NAME"])
