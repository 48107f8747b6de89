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


@pytest.mark.parametrize("argv,hint", [
    (("serve", "--jinja"), "--jinja: not needed here: the model file's own chat template is always rendered"),
    (("serve", "-fa", "on"), "-fa: not needed here: Strata's attention has no switch"),
    (("serve", "--flash-attn"), "--flash-attn: not needed here"),
    (("serve", "--cont-batching"), "--cont-batching: not needed here"),
    (("serve", "--metrics"), "--metrics: not needed here: GET /metrics is always served"),
    (("serve", "--slots"), "--slots: not needed here: GET /v1/slots is always served"),   # not --slot-ctx
    (("serve", "--mlock"), "--mlock: not needed here"),
    (("serve", "--no-mmap"), "--no-mmap: not needed here"),
    (("serve", "--chat-template", "chatml"), "--chat-template: not offered"),
    (("serve", "-hf", "org/model-GGUF"), "-hf: not offered: Strata downloads nothing"),
    (("serve", "--temp", "0.7"), "--temp: not offered: each request sets its own sampling"),
    (("serve", "-ub", "512"), "-ub: did you mean --prefill-chunk?"),
])
def test_a_llama_server_flag_strata_has_no_use_for_says_why(capsys, argv, hint):
    """A llama-server command line pasted after `strata serve`: its flags for what Strata always does (or
    does not do) were only 'unrecognized arguments', or worse a wrong hint (--slots: 'did you mean
    --slot-ctx?'), so the user could not tell a typo from a flag to drop."""
    rc, err = run_cli(capsys, *argv)
    assert rc == 2
    assert hint in err, err
    assert "did you mean" not in err or "-ub" in argv, err
    assert "usage:" not in err and len(err.strip().splitlines()) <= 3, err


def test_a_config_key_of_such_a_flag_says_why_too(tmp_path, capsys):
    """`flash_attn = true` in the file: as the flag, the reason instead of a bare unknown key."""
    from strata.server.config import ConfigError, file_problems, load_config

    p = tmp_path / "config.toml"
    p.write_text("flash_attn = true\nctx = 2048\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\): flash_attn \(not needed here: Strata's attention"):
        load_config({}, config_path=p, environ={})
    assert any("flash_attn: unknown key (not needed here" in problem for problem in file_problems(p))


def test_an_unknown_option_with_nothing_close_still_says_where_the_options_are(capsys):
    rc, err = run_cli(capsys, "serve", "--frobnicate")
    assert rc == 2
    assert err == ("strata serve: error: unrecognized arguments: --frobnicate\n"
                   "`strata serve --help` lists every option\n")


def test_a_path_a_command_cannot_write_is_named_without_a_traceback(capsys, tmp_path):
    target = tmp_path / "no-such-folder" / "timeline.jsonl"
    rc, err = run_cli(capsys, "replay", "generate", "--hours", "0.05", "--out", str(target))
    assert rc == 2   # the user's path: a usage error (it was 1)
    assert err == (f"strata replay: --out {target}: cannot write it (No such file or directory); give a file in a "
                   "folder that exists\n")


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
    assert f"cannot write to {blocker / 'x'}: {blocker} is a file, not a folder" in said   # was: Not a directory
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
