"""`strata replay` end to end through the CLI module: tables, --json schema, thinning, generate, errors."""

from __future__ import annotations

import argparse
import json

from strata.server.replay import cli


def run(argv, capsys):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    rc = cli.run(p.parse_args(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def tiny(tmp_path):
    rows = [("A", 0, 1000, 0, 100), ("B", 10, 300, 0, 20), ("A", 20, 1500, 1100, 100), ("C", 30, 200, 0, 10),
            ("B", 40, 500, 320, 10), ("A", 50, 2000, 1600, 10)]
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps({"conversation": c, "time": t, "prompt_tokens": n, "shared_tokens": s,
                                        "output_tokens": o}) + "\n" for c, t, n, s, o in rows))
    return str(path)


def test_json_schema_and_exact_counts(tmp_path, capsys):
    rc, out, _ = run([tiny(tmp_path), "--slots", "1,2", "--policies", "lru,default", "--json"], capsys)
    assert rc == 0
    res = {(r["slots"], r["policy"]): r for r in json.loads(out)["results"]}
    assert set(res) == {(1, "lru"), (1, "default"), (2, "lru"), (2, "default")}
    for r in res.values():
        assert {"slots", "policy", "prompt_tokens_total", "prompt_tokens_read", "vs_lru"} <= set(r)
        assert r["prompt_tokens_total"] == 5500
    assert res[(2, "lru")]["prompt_tokens_read"] == 4400 and res[(2, "lru")]["vs_lru"] == 0.0
    assert res[(2, "default")]["prompt_tokens_read"] == 2800
    assert abs(res[(2, "default")]["vs_lru"] - (2800 / 4400 - 1)) < 1e-12


def test_the_table_says_what_its_cells_are(tmp_path, capsys):
    """A new user read `shortest +181.3%` without a word of what it was against, or which way is better."""
    rc, out, _ = run([tiny(tmp_path), "--slots", "1,2", "--policies", "lru,default"], capsys)
    assert rc == 0
    assert "lru: the prompt tokens it read; the others: prompt tokens read against lru's (below 0: fewer, better)" \
        in out.splitlines()
    assert out.splitlines()[0].split() == ["policy", "1", "slot", "2", "slots"]     # it said "1 slots"
    rc, out, _ = run([tiny(tmp_path), "--slots", "2", "--policies", "default"], capsys)
    assert rc == 0 and "each: prompt tokens read against lru's (below 0: fewer, better)" in out.splitlines()


def test_table_and_thinned_draws(tmp_path, capsys):
    rc, out, _ = run([tiny(tmp_path), "--slots", "2", "--policies", "lru,expire:600", "--thin", "0.67",
                      "--draws", "3"], capsys)
    assert rc == 0 and "expire:600" in out and "worst" in out and "3 draws" in out


def test_generate_writes_a_replayable_timeline(tmp_path, capsys):
    out_file = tmp_path / "gen.jsonl"
    rc, _, err = run(["generate", "--kind", "agents", "--hours", "0.5", "--seed", "3", "--out", str(out_file)], capsys)
    assert rc == 0 and "wrote" in err
    rc, out, _ = run([str(out_file), "--slots", "2", "--policies", "lru,gds", "--json"], capsys)
    direct = run(["agents:0.5:3", "--slots", "2", "--policies", "lru,gds", "--json"], capsys)[1]
    assert rc == 0 and json.loads(out) == json.loads(direct)


def test_errors_are_messages_with_exit_status_2(tmp_path, capsys):
    for argv, needle in [([tiny(tmp_path), "--slots", "0"], "--slots"), ([tiny(tmp_path), "--policies", "x"], "unknown"),
                         (["nope.jsonl"], "cannot open"), ([tiny(tmp_path), "--thin", "2"], "--thin"),
                         (["agents:x"], "agents:HOURS:SEED"), ([tiny(tmp_path), "--draws", "0"], "--draws"),
                         ([tiny(tmp_path), "--draws", "3"], "needs --thin below 1"),
                         # named by the flag the user typed, not the setting's field (prefill_tps)
                         ([tiny(tmp_path), "--prefill-tps", "-5"], "--prefill-tps -5.0: expected >= 0"),
                         ([tiny(tmp_path), "--prompt-rate", "-1"], "--prompt-rate -1.0: expected >= 0"),
                         ([tiny(tmp_path), "--ram-min-tokens", "-1"], "--ram-min-tokens -1: expected >= 0")]:
        rc, _, err = run(argv, capsys)
        assert rc == 2 and needle in err, (argv, err)


def test_learned_is_a_policy_of_the_cli_and_reads_less_than_lru_on_agents(capsys):
    # two hours of generated agent traffic, 2 slots: the learned policy has seen enough histories to
    # decide and reads less than LRU and than seed 000's order (-30.2% and -25.0% when recorded)
    rc, out, _ = run(["agents:2:5", "--slots", "2", "--policies", "lru,affinity,default,learned,learned+protect",
                      "--json"], capsys)
    assert rc == 0
    res = {r["policy"]: r["prompt_tokens_read"] for r in json.loads(out)["results"]}
    assert res["learned"] < res["affinity"] < res["lru"] and res["learned+protect"] < res["lru"]
    assert res["default"] == res["learned"]   # the learned policy is what `strata serve` does by default


def test_sizes_without_end_are_refused_at_once(tmp_path, capsys):
    """`--hours inf` generated for ever; --slots or --overlay of 10^11 ran for minutes, then out of memory
    (a new user's mistyped values)."""
    import time

    for argv, needle in [(["generate", "--hours", "inf"], "--hours inf: expected more than 0 and at most 10000"),
                         (["generate", "--hours", "nan"], "--hours nan: expected"),
                         (["agents:1e12:0"], "--hours 1000000000000.0: expected"),
                         ([tiny(tmp_path), "--slots", "99999999999"], "expected counts from 1 to 65536"),
                         ([tiny(tmp_path), "--overlay", "99999999999"], "--overlay 99999999999: expected 1 to 1024")]:
        start = time.monotonic()
        rc, _, err = run(argv, capsys)
        assert rc == 2 and needle in err and time.monotonic() - start < 5, (argv, err)
