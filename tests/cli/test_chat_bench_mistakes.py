"""`strata chat` and `strata bench` given a new user's mistakes, run as the user runs them (a subprocess): a
llama.cpp flag gets the one meant, as `strata serve`'s do, and a sampling value out of range names the flag
typed (a session-39 trial: `strata chat -c 100` and `strata bench -ngl 99` said 'unrecognized arguments' alone;
`strata chat --top-p 2` answered `sampling: top_p must be in (0, 1]`, a name the user never typed)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def strata(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("argv, said", [
    (["chat", "-c", "100"], "-c: did you mean --ctx?"),
    (["chat", "-n", "64"], "-n: did you mean --max-tokens?"),
    (["chat", "-m", "x.gguf"], "-m: did you mean --model?"),
    (["bench", "-ngl", "99"], "-ngl: did you mean --backend cuda?"),
    (["bench", "-ctk", "q8_0"], "-ctk: did you mean --kv-type?"),
])
def test_a_llama_cpp_flag_gets_the_one_meant(argv, said):
    done = strata(*argv)
    assert done.returncode == 2 and said in done.stderr, done.stderr


@pytest.mark.parametrize("argv, said", [
    (["--top-p", "2"], "strata chat: --top-p must be in (0, 1], got 2.0"),
    (["--min-p", "3"], "strata chat: --min-p must be in [0, 1], got 3.0"),
    (["--temperature", "nan"], "strata chat: --temperature must be a finite number, got nan"),
    (["--repeat-penalty", "0"], "strata chat: --repeat-penalty must be > 0, got 0.0"),
])
def test_a_sampling_value_out_of_range_names_the_flag(argv, said):
    done = strata("chat", *argv)
    assert done.returncode == 2 and said in done.stderr.splitlines(), done.stderr
    assert "Traceback" not in done.stderr


def test_bench_backend_cuda_where_it_cannot_run_is_status_2_as_serve_gives():
    """`strata bench --backend cuda` on a CPU-only build (or without a device) ended with status 1 from inside the
    bench; `strata serve --backend cuda` refuses the same with 2 (docs/configuration.md)."""
    from strata.engine.gpu import resolve_backend

    try:
        resolve_backend("cuda")
        pytest.skip("CUDA runs here")
    except ValueError as e:
        reason = str(e)
    done = strata("bench", "--quick", "--backend", "cuda")
    assert done.returncode == 2, done.stderr
    assert f"strata bench: --backend cuda: {reason}" in done.stderr and "Traceback" not in done.stderr


def test_bench_backend_cuda_on_a_file_that_is_not_gguf_says_so_without_a_traceback(tmp_path):
    """`strata bench --backend cuda --model notes.gguf` (a text file) ended in a GGUFError traceback: the model's
    CUDA check read the file before the bench, which says so without --backend cuda; status 3, strata serve's for a
    model it cannot load (it was 1: test_damaged_model_files)."""
    notes = tmp_path / "notes.gguf"
    notes.write_text("this is my notes file, not a model\n", encoding="utf-8")
    done = strata("bench", "--quick", "--backend", "cuda", "--model", str(notes))
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"strata bench: GGUF {notes}: bad magic (not a GGUF file)"), done.stderr


@pytest.mark.parametrize("command", ["chat", "bench", "serve"])
def test_a_missing_model_file_is_status_3_in_every_command(command, tmp_path):
    """A model file that is not there is strata serve's 'model not loaded' (3, not retried by the app) in chat and
    bench too; they said 2, a flag's mistake (session 39's CLI trial)."""
    from strata.exit_status import MODEL_NOT_LOADED

    gone = tmp_path / "gone.gguf"
    argv = [command, "--model", str(gone)] + (["--no-config", "--port", "0"] if command == "serve" else [])
    done = strata(*argv)
    assert done.returncode == MODEL_NOT_LOADED, done.stderr
    assert f"--model {gone}: no such file" in done.stderr, done.stderr
