"""What the `strata` command says to a user who mistypes: an unknown option gets two lines (what is wrong,
with the option meant, and where the options are listed) instead of the whole usage; a path a command
cannot use gets one line naming it instead of a traceback. Not here: each command's own checks of its
values (each part's tests)."""

from __future__ import annotations

import pytest

from strata.cli import main as strata_main


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        rc = strata_main(list(argv))
    except SystemExit as e:             # argparse ends a parse error with SystemExit(2)
        rc = e.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv,meant", [
    (("serve", "--ctxx", "4096"), "--ctxx: did you mean --ctx?"),
    (("serve", "--ctx-size", "4096"), "--ctx-size: did you mean --ctx?"),        # llama.cpp's spelling
    (("serve", "-c", "4096"), "-c: did you mean --ctx?"),
    (("serve", "--parallel=2"), "--parallel: did you mean --batch?"),
    (("serve", "--n-gpu-layers", "99"), "--n-gpu-layers: did you mean --backend cuda?"),
    (("replay", "generate", "--huors", "1"), "--huors: did you mean --hours?"),
])
def test_an_unknown_option_names_the_option_meant_in_two_lines(capsys, argv, meant):
    rc, err = run_cli(capsys, *argv)
    assert rc == 2
    assert meant in err, err
    assert f"`strata {argv[0]} --help` lists every option" in err
    assert "usage:" not in err and len(err.strip().splitlines()) <= 3, err


@pytest.mark.parametrize("argv,hint", [
    (("serve", "model.gguf"), "model.gguf: did you mean --model model.gguf?"),    # a model given bare
    (("bench", "/m/x.GGUF"), "/m/x.GGUF: did you mean --model /m/x.GGUF?"),
    (("serv",), "serv: did you mean serve?"),                                       # a misspelt command
    (("replya", "t.jsonl"), "replya: did you mean replay?"),
])
def test_a_bare_model_path_or_a_misspelt_command_gets_the_form_meant(capsys, argv, hint):
    rc, err = run_cli(capsys, *argv)
    assert rc == 2
    assert hint in err, err
    assert "usage:" not in err and len(err.strip().splitlines()) <= 3, err


def test_an_unknown_option_with_nothing_close_still_says_where_the_options_are(capsys):
    rc, err = run_cli(capsys, "serve", "--frobnicate")
    assert rc == 2
    assert err == ("strata serve: error: unrecognized arguments: --frobnicate\n"
                   "`strata serve --help` lists every option\n")


def test_a_path_a_command_cannot_write_is_named_without_a_traceback(capsys, tmp_path):
    target = tmp_path / "no-such-folder" / "timeline.jsonl"
    rc, err = run_cli(capsys, "replay", "generate", "--hours", "0.05", "--out", str(target))
    assert rc == 1
    assert err == f"strata replay: {target}: No such file or directory\n"


def test_a_disk_bench_larger_than_any_is_refused_before_writing(capsys, tmp_path):
    """`strata setup --disk-bench-mib 99999999999` wrote its bench file until the disk was full (5 GB in 25 s
    here; a kill left it behind)."""
    rc, err = run_cli(capsys, "setup", "--yes", "--disk-bench-mib", "99999999999", "--config", str(tmp_path / "c.toml"),
                      "--cold-dir", str(tmp_path / "cold"))
    assert rc == 2 and "--disk-bench-mib must be 8 to 16384, got 99999999999" in err
    assert not (tmp_path / "cold").exists() and not (tmp_path / "c.toml").exists()


def test_a_cold_dir_setup_cannot_write_says_to_pass_another(capsys, tmp_path):
    """`strata setup --yes --cold-dir FILE/x` stopped with 'cannot write to ...' and no word of what to do."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    rc, err = run_cli(capsys, "setup", "--yes", "--skip-bench", "--cold-dir", str(blocker / "x"),
                      "--config", str(tmp_path / "c.toml"))
    said = rc if isinstance(rc, str) else err        # SystemExit("strata setup: ...") prints it and exits 1
    assert f"cannot write to {blocker / 'x'}" in said
    assert said.rstrip().endswith("(pass another --cold-dir PATH)") and not (tmp_path / "c.toml").exists()


@pytest.mark.parametrize("where,why", [("a-file/strata.toml", "is a file, not a folder"),
                                       (".", "a folder, not a file")])
def test_a_config_path_setup_cannot_write_is_refused_before_the_questions(capsys, tmp_path, where, why):
    """setup asked every question and ran the bench, then said 'cannot write .../strata.toml: File exists'."""
    (tmp_path / "a-file").write_text("x")
    target = tmp_path / where
    rc = strata_main(["setup", "--yes", "--skip-bench", "--config", str(target)])
    out, err = capsys.readouterr()
    assert rc == 1 and f"cannot write {target}: " in err and why in err and "(pass another --config PATH)" in err
    assert "Which model?" not in out and "Context size" not in out      # nothing asked, nothing measured
