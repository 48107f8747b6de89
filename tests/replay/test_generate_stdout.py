"""`strata replay generate` with the default --out -: the timeline goes to sys.stdout, as on Windows, which
has no /dev/stdout (the path it was written to before: FileNotFoundError there). Not here: the rest of
the replay CLI (test_cli.py)."""

from __future__ import annotations

import argparse
import json

from strata.server.replay import cli


def test_generate_to_stdout_writes_through_sys_stdout(tmp_path, capsys):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert cli.run(p.parse_args(["generate", "--kind", "agents", "--hours", "0.2", "--seed", "5"])) == 0
    printed = capsys.readouterr().out      # sys.stdout, which /dev/stdout (file descriptor 1) bypassed
    rows = [json.loads(line) for line in printed.splitlines()]
    assert rows and {"conversation", "time", "prompt_tokens", "shared_tokens", "output_tokens"} <= set(rows[0])
    out_file = tmp_path / "gen.jsonl"
    assert cli.run(p.parse_args(["generate", "--kind", "agents", "--hours", "0.2", "--seed", "5",
                                 "--out", str(out_file)])) == 0
    assert out_file.read_text(encoding="utf-8") == printed          # the same timeline either way
