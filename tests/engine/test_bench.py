"""`strata bench` on a tiny model: the numbers it reports exist and are positive, `--json` prints
one JSON object, bad arguments are refused. Not a speed test (speed goals live in benchmarks/)."""

from __future__ import annotations

import argparse
import json

from strata.engine import bench

from strata.exit_status import MODEL_NOT_LOADED


def test_run_bench_quick_reports_every_figure(tiny_model_factory):
    path = tiny_model_factory(dtype="Q8_0", seed=9, ctx_len=256)
    r = bench.run_bench(path, threads=2, quick=True)
    for key in ("prefill_tps", "prefill_128_tps", "decode_tps", "batched4_tps", "load_s", "batched_speedup"):
        assert r[key] > 0, key
    assert r["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 2  # layers x (K, V) x kv heads x head size x f16
    assert r["threads"] == 2 and r["backend"].startswith("cpu-")


def parse(argv):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(argv)


def test_cli_json_and_errors(tiny_model_factory, capsys):
    path = tiny_model_factory(dtype="Q8_0", seed=9, ctx_len=256)
    assert bench.run(parse(["--model", str(path), "--threads", "1", "--quick", "--json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decode_tps"] > 0 and out["quick"] is True
    assert bench.run(parse(["--model", str(path), "--threads", "0"])) == 2
    assert "--threads must be 1 to 4096" in capsys.readouterr().err
    # a missing file is strata serve's 'model not loaded' (3), named before anything loads
    assert bench.run(parse(["--model", str(path) + ".missing", "--quick"])) == MODEL_NOT_LOADED
    assert "no such file" in capsys.readouterr().err


def test_on_a_terminal_each_stage_is_said_as_it_begins_and_piped_nothing(tiny_model_factory, tmp_path):
    """The bench said nothing until its end (8 s on the default model with one thread, minutes on a big one).
    On a terminal each stage is said as it begins, on standard error; piped (the setup wizard reads its JSON
    and its error) nothing is added."""
    import os
    import pty
    import subprocess
    import sys

    path = tiny_model_factory(dtype="Q8_0", seed=9, ctx_len=256)
    command = [sys.executable, "-m", "strata", "bench", "--model", str(path), "--threads", "1", "--quick", "--json"]
    master, slave = pty.openpty()
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, cwd=tmp_path)
    os.close(slave)
    said = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:     # the bench closed the terminal
            break
        if not data:
            break
        said += data
    os.close(master)
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 0
    lines = said.decode().splitlines()
    assert lines == [f"bench: loading {path.name}...", "bench: reading a prompt of 128 tokens...",
                     "bench: generating 16 tokens...", "bench: generating 16 tokens in each of 4 requests at once..."]
    assert json.loads(out)["decode_tps"] > 0
    piped = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert piped.returncode == 0 and piped.stderr == "" and json.loads(piped.stdout)["quick"] is True


def test_without_model_it_measures_the_configured_one_as_chat_and_serve_run_it(tiny_model_factory, tmp_path):
    """`strata bench` measured the default model whatever the configuration named, where `strata chat` and
    `strata serve` run the configured one (a new-user trial). A configured model that is not there is refused
    naming the file."""
    import os
    import subprocess
    import sys

    path = tiny_model_factory(dtype="Q8_0", seed=9, ctx_len=256)
    config = tmp_path / "config.toml"
    config.write_text(f"model = {str(path)!r}\n", encoding="utf-8")
    env = {**os.environ, "STRATA_CONFIG": str(config)}
    command = [sys.executable, "-m", "strata", "bench", "--threads", "1", "--quick", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"] == str(path)
    config.write_text(f"model = {str(tmp_path / 'gone.gguf')!r}\n", encoding="utf-8")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == MODEL_NOT_LOADED and f"{config}: model =" in done.stderr and "gone.gguf" in done.stderr, \
        done.stderr
