"""`strata bench` on a tiny model: the numbers it reports exist and are positive, `--json` prints
one JSON object, bad arguments are refused. Not a speed test (speed goals live in benchmarks/)."""

from __future__ import annotations

import argparse
import json

from strata.engine import bench


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
    # a missing file is a bad argument (2), named before anything loads
    assert bench.run(parse(["--model", str(path) + ".missing", "--quick"])) == 2
    assert "no such file" in capsys.readouterr().err
