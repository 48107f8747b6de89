"""Mistakes a new user makes when starting `strata serve`, each met with one message that names the
problem and says what to do: a misspelt key or `STRATA_SLOT_*` variable (with the name meant), a variable
put where it is not read, a --host that is not this machine's, contexts whose KV does not fit in memory.
Not here: the configuration's merge order and value checks (test_config.py)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import pytest
from strata.server.config import ConfigError, load_config, validate

from strata.exit_status import CANNOT_LISTEN, MODEL_NOT_LOADED


def write(tmp_path, text: str):
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


# ---------------------------------------------------------------------------------------------
# The configuration file and the environment
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,needle", [
    ("ctxx = 100\n", "ctxx (did you mean ctx?)"),
    ("ctx_size = 4096\n", "ctx_size (did you mean ctx?)"),          # llama.cpp's name
    ("parallel = 2\n", "parallel (did you mean batch?)"),
    ("no_such_thing = 1\n", "unknown key(s): no_such_thing (docs/configuration.md"),
])
def test_an_unknown_key_names_the_key_meant(tmp_path, text, needle):
    with pytest.raises(ConfigError) as e:
        load_config({}, config_path=write(tmp_path, text), environ={})
    assert needle in str(e.value)


def test_a_misspelt_variable_in_the_env_table_is_refused_with_the_name_meant(tmp_path):
    p = write(tmp_path, "[env]\nSTRATA_SLOT_TTL_MAXS = 120\n")
    with pytest.raises(ConfigError) as e:
        load_config({}, config_path=p, environ={})
    assert "[env] STRATA_SLOT_TTL_MAXS: not one of the variables the [env] table sets" in str(e.value)
    assert "did you mean STRATA_SLOT_TTL_MAX_S?" in str(e.value)


def test_the_api_key_in_the_env_table_points_to_the_api_key_key(tmp_path):
    # it was accepted and ignored: a server the user believed keyed ran open
    p = write(tmp_path, '[env]\nSTRATA_API_KEY = "secret"\n')
    with pytest.raises(ConfigError) as e:
        load_config({}, config_path=p, environ={})
    assert "set `api_key = ...` at the top of the file" in str(e.value)


def test_every_variable_the_server_reads_is_accepted_in_the_env_table(tmp_path):
    from strata.server import slot_policy

    names = [*slot_policy.ENV_NAMES.values(), *slot_policy.LEARN_ENV_NAMES.values(), "STRATA_RESTORE_LADDER"]
    p = write(tmp_path, "[env]\n" + "".join(f'{n} = ""\n' for n in names))
    config = load_config({}, config_path=p, environ={})
    validate(config)
    assert set(names) <= set(config.env)


def test_a_misspelt_slot_variable_in_the_environment_stops_start_up():
    config = load_config({}, environ={"STRATA_SLOT_TTL_MAXS": "120", "STRATA_URL": "http://x", "HOME": "/h"})
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert str(e.value).startswith("STRATA_SLOT_TTL_MAXS: not a variable `strata serve` reads")
    assert "did you mean STRATA_SLOT_TTL_MAX_S?" in str(e.value)
    validate(load_config({}, environ={"STRATA_SLOT_TTL_MAX_S": "120", "STRATA_URL": "http://x"}))


# ---------------------------------------------------------------------------------------------
# Where to listen
# ---------------------------------------------------------------------------------------------

def _serve(*flags: str, preexec_fn=None, until: str | None = None) -> subprocess.CompletedProcess:
    """`strata serve --no-config FLAGS` on the default model; stopped at the line holding `until`."""
    proc = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--no-config", "--threads", "1", *flags],
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if until and until in line:
                proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, rc, "", "".join(lines))


@pytest.mark.parametrize("flags,env_key,warned", [
    (("--host", "0.0.0.0"), None, True),
    (("--host", "0.0.0.0", "--api-key", "k"), None, False),
    (("--host", "0.0.0.0"), "k", False),                                  # STRATA_API_KEY
    (("--host", "127.0.0.1"), None, False),
])
def test_listening_beyond_this_machine_without_a_key_is_warned(monkeypatch, flags, env_key, warned):
    # every endpoint was open to the network with no word
    monkeypatch.delenv("STRATA_API_KEY", raising=False)
    if env_key:
        monkeypatch.setenv("STRATA_API_KEY", env_key)
    done = _serve(*flags, "--port", "0", until="listening on")   # stopped while the model loads: any status
    assert "listening on http://" in done.stderr, done.stderr
    said = "--host 0.0.0.0 listens beyond this machine with no --api-key: anyone who can reach it can use the model"
    assert (said in done.stderr) == warned, done.stderr


def test_a_disk_level_folder_that_cannot_be_made_says_the_level_is_off_and_what_to_do(tmp_path):
    # it said "conversation cache cold level X: unavailable: File exists" and started without the level
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = _serve("--port", "0", "--conversation-cache-cold-dir", str(blocker / "cold"),
                  "--conversation-cache-cold-mib", "64", until="loaded in")
    assert (f"conversation cache cold level {blocker / 'cold'}: unavailable: Not a directory; the level is off "
            "(nothing is kept there): give --conversation-cache-cold-dir a folder this user can write") in done.stderr, \
        done.stderr
    assert f"cold {blocker / 'cold'} 64 MiB unavailable" in done.stderr         # the INFO line
    # the folder itself a file: it said "unavailable: File exists" (a new-user trial)
    done = _serve("--port", "0", "--conversation-cache-cold-dir", str(blocker),
                  "--conversation-cache-cold-mib", "64", until="loaded in")
    assert f"cold level {blocker}: unavailable: a file is there, not a folder; the level is off" in done.stderr, \
        done.stderr


@pytest.mark.parametrize("host,reason", [
    ("192.0.2.1", "Cannot assign requested address"),   # TEST-NET-1: never an address of this machine
    ("a..b", "'a..b' is not a valid host name"),        # was a UnicodeError traceback
])
def test_a_host_that_is_not_this_machines_says_what_host_takes(host, reason):
    done = _serve("--host", host, "--port", "8089")
    assert done.returncode == CANNOT_LISTEN, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert reason in done.stderr, done.stderr
    assert "--host takes an address of this machine: 127.0.0.1" in done.stderr
    assert "another server" not in done.stderr          # the busy-port advice does not apply


def test_a_host_that_is_not_this_machines_stops_start_up_with_any_free_port_too():
    # --port 0 skipped the host check: the model loaded in the background after "cannot listen", and its
    # INFO line then claimed "listening on http://192.0.2.1:0"
    from strata.server.cli import port_taken

    assert "--host takes an address of this machine" in port_taken("192.0.2.1", 0)
    assert port_taken("127.0.0.1", 0) is None
    done = _serve("--host", "192.0.2.1", "--port", "0")
    assert done.returncode == CANNOT_LISTEN, done.stderr
    assert "--host takes an address of this machine: 127.0.0.1" in done.stderr
    assert "loaded in" not in done.stderr and "loading the model" not in done.stderr, done.stderr


def test_backend_cuda_where_it_cannot_run_stops_before_listening():
    # it printed "listening on ... (loading the model)" first: a client saw a server that then exited
    from strata.engine.gpu import resolve_backend

    try:
        resolve_backend("cuda")
        pytest.skip("CUDA runs here")
    except ValueError as e:
        reason = str(e)
    done = _serve("--backend", "cuda", "--port", "0")
    assert done.returncode == 2, done.stderr     # a setting this machine cannot honour: the app does not retry it
    assert f"--backend cuda: {reason}" in done.stderr
    assert "listening on" not in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("arch,lacks", [("deepseek2", "deepseek2's multi-head latent attention"),
                                        ("qwen3moe", "experts (4 in this one)")])
def test_backend_cuda_for_a_model_only_the_cpu_runs_says_so_on_any_build(tiny_model_factory, arch, lacks):
    # a CPU-only build said "this build has no CUDA backend (... rebuild with STRATA_CUDA=ON ...)" for a
    # GLM-4.7-Flash (deepseek2) file, which the CUDA backend refuses anyway: a rebuild for nothing
    path = tiny_model_factory(arch=arch, n_layer=2, n_ff=32, n_expert=4, n_expert_used=2)
    done = _serve("--model", str(path), "--backend", "cuda", "--port", "0")
    assert done.returncode == 2, done.stderr
    assert f"--backend cuda: the CUDA backend has no {lacks}; this model runs on the CPU (--backend cpu, or auto)" \
        in done.stderr, done.stderr
    assert "rebuild" not in done.stderr and "listening on" not in done.stderr, done.stderr
    bench = subprocess.run([sys.executable, "-m", "strata", "bench", "--quick", "--model", str(path), "--backend", "cuda"],
                           capture_output=True, text=True, timeout=120)
    assert bench.returncode == 2 and f"strata bench: --backend cuda: the CUDA backend has no {lacks};" in bench.stderr


@pytest.mark.parametrize("threads,n_cpus,warned", [
    (None, 2, False), (2, 2, False), (1, 16, False), (3, 2, True), (500, 2, True), (8, None, False),
])
def test_more_threads_than_cores_is_warned(threads, n_cpus, warned):
    from strata.server.cli import threads_warning

    said = threads_warning(threads, n_cpus)
    assert (said is not None) == warned
    if warned:
        assert said.startswith(f"--threads {threads} is more than this machine's {n_cpus} logical cores")
        assert "leave --threads unset" in said


def test_the_server_warns_of_more_threads_than_cores_at_start_up():
    import os

    too_many = str((os.cpu_count() or 1) + 1)
    done = _serve("--threads", too_many, "--port", "0", until="listening on")
    assert f"WARNING strata.server: --threads {too_many} is more than this machine's" in done.stderr, done.stderr


@pytest.mark.parametrize("code,port,hint", [
    (errno.EADDRINUSE, 8080, "is another server running there? --port chooses another"),
    (errno.EACCES, 80, "ports below 1024 need administrator rights"),
    (errno.EADDRNOTAVAIL, 8080, "--host takes an address of this machine"),
    (errno.EACCES, 8080, "--host and --port choose another address"),
])
def test_each_bind_failure_gets_its_own_advice(code, port, hint):
    from strata.server.cli import bind_hint

    assert hint in bind_hint(code, port)


# ---------------------------------------------------------------------------------------------
# Contexts that do not fit
# ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(sys.platform != "linux", reason="limits the address space with RLIMIT_AS")
def test_contexts_too_large_for_memory_say_which_flags_to_lower(default_model_path):
    import resource

    def at_most_8_gib() -> None:          # the KV below needs 23 GB: refused on any machine
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    done = _serve("--model", str(default_model_path), "--port", "0", "--ctx", "1000000", "--batch", "1",
                  "--slot-ctx", "4096", "--conversation-cache-mib", "0", "--no-memory-check",  # the engine's own error
                  preexec_fn=at_most_8_gib, until="loaded in")
    assert done.returncode == MODEL_NOT_LOADED, done.stderr
    assert "the model could not be loaded" in done.stderr, done.stderr
    assert ("not enough memory for the KV cache of the main context of 1000000 tokens and 1 slot of 4096 "
            "tokens: lower --ctx, --batch or --slot-ctx, or use --kv-type q8_0") in done.stderr, done.stderr


# ---------------------------------------------------------------------------------------------
# The model file
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given,says", [
    ("folder", "a folder, not a GGUF file (`strata models --dir {path}` lists the GGUF files in it)"),
    ("missing.gguf", "no such file (`strata models` lists the GGUF files Strata can find)"),
])
def test_a_model_path_without_a_gguf_file_stops_before_listening(tmp_path, given, says):
    path = tmp_path / given
    if given == "folder":
        path.mkdir()
    done = _serve("--model", str(path), "--port", "0")
    assert done.returncode == MODEL_NOT_LOADED, done.stderr
    assert f"--model {path}: " + says.format(path=path) in done.stderr, done.stderr
    assert "listening on" not in done.stderr               # it was printed, then the error


def test_a_missing_model_the_configuration_file_names_is_said_to_be_the_files(tmp_path):
    """A new user's hand-edited file named a model that is not there: serve said `--model PATH: no such file`, a
    flag never typed (`strata chat` and `strata bench` named the file's key already)."""
    missing, config = tmp_path / "gone.gguf", tmp_path / "config.toml"
    config.write_text(f"model = '{missing}'\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--config", str(config), "--port", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == MODEL_NOT_LOADED, done.stderr
    assert f"the model could not be loaded: {config}: model = {missing}: no such file (" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--config", str(config), "--port", "0",
                           "--model", str(missing)], capture_output=True, text=True, timeout=120)
    assert f"the model could not be loaded: --model {missing}: no such file (" in done.stderr, done.stderr


@pytest.mark.parametrize("kind,says", [
    ("text", "bad magic (not a GGUF file) (give a .gguf model file"),
    ("bloom", "unsupported architecture 'bloom' (supported: llama, "),
])
def test_a_model_file_the_engine_cannot_run_is_named_as_it_was_given(tmp_path, tiny_model_factory, kind, says):
    """docs/configuration.md: the message names the model as it was given, `--model PATH` or `FILE: model = PATH`,
    for a file that is not GGUF too. A missing one was; one the reader refused was named by its path alone
    (`GGUF PATH: bad magic`), never saying the configuration file named it (found in session 40's docs trial)."""
    if kind == "text":
        path = tmp_path / "notes.gguf"
        path.write_text("not a model\n")
    else:
        path = tiny_model_factory(arch=kind)
    config = tmp_path / "config.toml"
    config.write_text(f"model = '{path}'\n", encoding="utf-8")
    for flags, named in [(["--config", str(config)], f"{config}: model = {path}"),
                         (["--no-config", "--model", str(path)], f"--model {path}")]:
        done = subprocess.run([sys.executable, "-m", "strata", "serve", *flags, "--port", "0"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == MODEL_NOT_LOADED, done.stderr
        assert f"the model could not be loaded: {named}: {says}" in done.stderr, done.stderr
        assert done.stderr.count(str(path)) == 1, done.stderr      # the path once, not the reader's copy again


@pytest.mark.parametrize("given", ["./notes.gguf", "~/notes.gguf"])
def test_a_refused_model_path_spelt_another_way_is_named_once(tmp_path, given):
    """`--model ./notes.gguf` (or `~/notes.gguf`) names the file the reader opened, `notes.gguf` (`/home/...`):
    the name was that path all the same, so the reader's `GGUF PATH: ` is dropped as it is for a path spelt as
    the reader spells it (f17c503 compared the spellings: `--model ./notes.gguf: GGUF notes.gguf: bad magic`)."""
    (tmp_path / "notes.gguf").write_text("not a model\n")
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--no-config", "--model", given, "--port", "0"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == MODEL_NOT_LOADED, done.stderr
    assert f"the model could not be loaded: --model {given}: bad magic (not a GGUF file)" in done.stderr, done.stderr


@pytest.mark.parametrize("kind,says", [
    ("text", "bad magic (not a GGUF file)"),
    ("bloom", "unsupported architecture 'bloom' (supported: llama, "),
])
def test_a_model_file_the_engine_cannot_run_stops_before_listening(tmp_path, tiny_model_factory, kind, says):
    # it printed "listening on ... (loading the model)" after the error, then "stopping"
    if kind == "text":
        path = tmp_path / "notes.gguf"
        path.write_text("not a model\n")
    else:
        path = tiny_model_factory(arch=kind)
    done = _serve("--model", str(path), "--port", "0")
    assert done.returncode == MODEL_NOT_LOADED, done.stderr
    assert "the model could not be loaded: " in done.stderr and says in done.stderr, done.stderr
    assert "listening on" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("where,says", [
    ("missing-folder/timeline.jsonl", "cannot write there: No such file or directory (its folder must exist)"),
    (".", "cannot write there: Is a directory"),
])
def test_a_timeline_path_that_cannot_be_written_is_a_bad_flag_not_a_failed_model_load(tmp_path, where, says):
    # it was reported as "the model could not be loaded: [Errno 2] ..." after "listening on"
    target = tmp_path / where
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0",
                           "--timeline-out", str(target)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"strata serve: --timeline-out {target}: {says}\n"


def test_a_strata_config_that_names_no_file_stops_start_up(tmp_path):
    # it was ignored: a typo in STRATA_CONFIG ran the server on the defaults without a word
    missing = tmp_path / "confg.toml"
    with pytest.raises(ConfigError) as e:
        load_config({}, environ={"STRATA_CONFIG": str(missing)}, use_default_file=True)
    assert str(e.value).startswith(f"STRATA_CONFIG={missing}: no such file")
    assert "unset STRATA_CONFIG" in str(e.value)
    load_config({}, environ={"STRATA_CONFIG": str(missing)}, use_default_file=False)   # --no-config: not read


def test_strata_config_expands_the_home_folder_as_strata_setup_does(tmp_path, monkeypatch):
    # `strata setup` writes to ~/x.toml for STRATA_CONFIG="~/x.toml"; serve looked for a literal "~" folder
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "x.toml").write_text("ctx = 4096\n")
    config = load_config({}, environ={"STRATA_CONFIG": "~/x.toml"}, use_default_file=True)
    assert config.ctx == 4096


def test_two_levels_on_one_folder_stop_start_up_before_listening(tmp_path):
    """configuration.md: two levels on the same folder stop start-up with a message naming them. It was
    found only while the model loaded: 'the model could not be loaded: --conversation-cache-warm-dir and
    ...', exit status 1, after 'listening on' (a new-user trial)."""
    folder = str(tmp_path / "conversations")
    done = _serve("--port", "0", "--conversation-cache-warm-dir", folder, "--conversation-cache-warm-mib", "16",
                  "--conversation-cache-cold-dir", folder, "--conversation-cache-cold-mib", "16")
    assert done.returncode == 2, done.stderr
    assert ("--conversation-cache-warm-dir and --conversation-cache-cold-dir name the same folder "
            f"'{folder}'; give each its own") in done.stderr
    assert "listening on" not in done.stderr and "could not be loaded" not in done.stderr
