"""The mechanism under the plan: the disk bench (real file I/O), the skip event, the machine profile
and the model facts read from real GGUF files."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from strata.installer.bench import BenchSkipped, disk_speed, engine_speed, run_machine_bench
from strata.installer.model_facts import ModelFileError, find_models, read_model_facts
from strata.installer.profile import disk_facts, existing_parent, machine_profile


def test_disk_speed_writes_reads_and_cleans_up(tmp_path):
    seen = []
    speed = disk_speed(tmp_path / "cold", 16, progress=lambda st, fr, msg: seen.append((st, fr)))
    assert speed.size_mib == 16 and speed.write_mib_s > 0 and speed.read_mib_s > 0
    assert not list((tmp_path / "cold").iterdir())  # the bench file is gone
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) == 4


def test_disk_speed_refuses_a_tiny_size(tmp_path):
    with pytest.raises(ValueError, match="size_mib must be >= 8, got 1"):
        disk_speed(tmp_path, 1)


def test_the_skip_event_stops_the_disk_bench_and_leaves_nothing(tmp_path):
    skip = threading.Event()

    def progress(stage, fraction, message):
        if fraction >= 0.25:
            skip.set()

    with pytest.raises(BenchSkipped):
        disk_speed(tmp_path, 64, progress, skip)
    assert not list(tmp_path.iterdir())
    report = run_machine_bench(None, tmp_path, 1, skip=skip, disk_mib=8)
    assert report.disk.write_mib_s is None and any("skipped" in n for n in report.notes)


def test_the_machine_bench_reports_ram_and_the_folder(tmp_path):
    report = run_machine_bench(None, tmp_path / "c", 1, disk_mib=8)
    assert report.ram_total_mib >= report.ram_available_mib > 0
    assert report.disk.folder == str(tmp_path / "c") and report.disk.read_mib_s > 0


def test_an_unwritable_folder_is_a_note_not_a_crash(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    report = run_machine_bench(None, blocker / "sub", 1, disk_mib=8)
    assert report.disk.write_mib_s is None and any("cannot measure" in n for n in report.notes)


def test_the_machine_profile_is_this_machine():
    import os

    m = machine_profile()
    assert 1 <= m.n_cores <= m.n_logical and m.n_logical == (os.cpu_count() or m.n_logical)
    assert m.ram_total_mib > 256
    assert disk_facts(existing_parent("/no/such/folder/here")).free_mib > 0


def test_model_facts_of_a_tiny_gguf(tiny_model_factory):
    path = tiny_model_factory(n_layer=3, n_embd=64, n_head=4, n_head_kv=2, ctx_len=1024)
    facts = read_model_facts(path)
    assert (facts.n_layer, facts.n_head_kv, facts.head_dim, facts.n_ctx_train) == (3, 2, 16, 1024)
    assert facts.kv_bytes_per_token == 2 * 3 * 2 * 16 * 2
    assert facts.size_bytes == path.stat().st_size and facts.n_expert == 0
    with_experts = read_model_facts(tiny_model_factory(arch="qwen3moe", n_expert=8, n_expert_used=2))
    assert (with_experts.arch, with_experts.n_expert) == ("qwen3moe", 8)


def test_model_facts_of_the_default_model(default_model_path):
    facts = read_model_facts(default_model_path)
    # SmolLM2-135M: 30 layers, 3 KV heads of 64, trained on 8192 tokens -> 23040 bytes per token
    assert (facts.n_layer, facts.n_head_kv, facts.head_dim, facts.n_ctx_train) == (30, 3, 64, 8192)
    assert facts.kv_bytes_per_token == 23040
    found, default = find_models()
    assert default == str(default_model_path) and found[0] == default


def test_the_wizard_offers_only_models_the_engine_runs(tmp_path, monkeypatch, tiny_model_factory):
    """The user's models folder holds one it runs and one it does not: only the first is offered."""
    import shutil

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))       # platformdirs' user data dir on Linux
    folder = tmp_path / "strata" / "models"
    folder.mkdir(parents=True)
    shutil.copy(tiny_model_factory(arch="qwen3moe", n_expert=4, n_expert_used=2), folder / "moe.gguf")
    shutil.copy(tiny_model_factory(arch="phi3"), folder / "phi3.gguf")
    found, _ = find_models()
    assert str(folder / "moe.gguf") in found and not any(p.endswith("phi3.gguf") for p in found)


@pytest.mark.parametrize("content,message", [
    (None, "no such file"), (b"NOPE" + bytes(60), "not a GGUF file"), (b"GGUF\x03\x00", "cannot read its GGUF metadata"),
])
def test_bad_model_files_are_named(tmp_path, content, message):
    path = tmp_path / "m.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelFileError, match=message):
        read_model_facts(path)


def test_a_model_the_engine_cannot_run_is_refused_in_its_words(tiny_model_factory):
    """Refused when it is chosen (the wizard asks again), not after a configuration was written for it."""
    with pytest.raises(ModelFileError, match=r"Strata cannot run this model: .*unsupported architecture 'mamba' "
                                             r"\(supported: llama, mistral3, smollm3, qwen2, qwen3, qwen3moe, "
                                             r"gpt-oss, glm4moe, gemma3, seed_oss, deepseek2\)"):
        read_model_facts(tiny_model_factory(arch="mamba"))


def test_the_engine_bench_measures_the_default_model(tmp_path, default_model_path):
    pytest.importorskip("strata.engine.bench", reason="the engine's bench module is not in this tree yet")
    report = run_machine_bench(str(default_model_path), tmp_path, 2, disk_mib=8)
    assert report.bench is not None, report.notes
    assert report.bench.prefill_tps > 0 and report.bench.decode_tps > 0


def test_the_engine_bench_of_a_file_it_refuses_says_the_benchs_own_words(tmp_path, tiny_model_factory):
    """It runs as `strata bench` in a process of its own: its refusal comes back as its message, one line."""
    whole = tiny_model_factory(n_embd=128, n_ff=256).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) - 4096])
    with pytest.raises(RuntimeError) as failed:
        engine_speed(str(cut), 1)
    said = str(failed.value)
    assert said.startswith(f"GGUF {cut}: tensor ") and "runs past the end of the file" in said, said
    assert "\n" not in said and not said.startswith("strata bench")
    report = run_machine_bench(str(cut), tmp_path / "cold", 1, disk_mib=8)
    assert report.bench is None and report.notes[0] == f"the engine's bench failed: {said}"


def test_a_skip_ends_the_engines_bench_process_at_once(tmp_path, tiny_model_factory):
    slow = tiny_model_factory(n_layer=4, n_embd=1024, n_head=8, n_head_kv=8, n_ff=4096, dtype="F16", ctx_len=4096)
    skip = threading.Event()
    threading.Timer(1.0, skip.set).start()     # the whole bench takes 8 s or more with one thread
    t0 = time.monotonic()
    with pytest.raises(BenchSkipped):
        engine_speed(str(slow), 1, skip=skip, quick=False)
    assert time.monotonic() - t0 < 3.0
    assert not [c for c in psutil.Process().children() if c.status() != psutil.STATUS_ZOMBIE and "bench" in c.cmdline()]


@pytest.mark.parametrize("out,expected", [
    ("NVIDIA H200, 143771\n", ("NVIDIA H200", 143771)),
    ("NVIDIA GeForce RTX 4090, 24564\nNVIDIA GeForce RTX 4090, 24564\n", ("NVIDIA GeForce RTX 4090", 24564)),
    ("Tesla T4, [N/A]\n", ("Tesla T4, [N/A]", None)),
    ("", (None, None)),
])
def test_nvidia_smi_lines_are_parsed(out, expected):
    from strata.installer.profile import parse_nvidia_smi

    assert parse_nvidia_smi(out) == expected


def test_an_nvidia_smi_line_that_is_not_utf8_is_read_with_the_byte_replaced(tmp_path, monkeypatch):
    # a real program named nvidia-smi on PATH writing a byte no UTF-8 (nor cp1252: 0x81) has: the
    # UnicodeDecodeError of text=True escaped detect_gpu and ended the setup
    from strata.installer.profile import detect_gpu

    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf 'NVIDIA \\201 GPU, 8192\\n'\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpu() == ("NVIDIA \ufffd GPU", 8192)


def test_the_machine_profile_in_a_container_is_the_memory_its_limit_allows(tmp_path):
    """`strata setup` in a 2 GiB container (500 MiB used) on a bigger host: the plan is made for 2 GiB, not for the
    host's RAM (which `strata serve`'s memory check, reading the same limit, would then refuse)."""
    from tests.fixtures.cgroup_tree import limited_group

    host = machine_profile()
    m = machine_profile(cgroup=limited_group(tmp_path, "user.slice/flatpak-strata.scope", 2048, 500))
    assert m.ram_total_mib == min(2048, host.ram_total_mib)
    assert m.ram_available_mib <= 1548 and m.n_cores == host.n_cores


def test_the_disk_bench_removes_a_file_a_killed_setup_left_but_not_one_being_written(tmp_path):
    """A setup killed mid-bench (the wizard's process ended hard) left its hidden `.strata-bench-*.tmp`, up to
    --disk-bench-mib, in the conversations' folder for good; the next bench there removes it. A file written
    within the hour is another setup's, running now: kept."""
    import os
    import time

    folder = tmp_path / "cold"
    folder.mkdir()
    left = folder / ".strata-bench-0123456789abcdef0123456789abcdef.tmp"
    left.write_bytes(b"\0" * 4096)
    two_hours_ago = time.time() - 7200
    os.utime(left, (two_hours_ago, two_hours_ago))
    running = folder / ".strata-bench-fedcba9876543210fedcba9876543210.tmp"
    running.write_bytes(b"\0" * 4096)
    mine = folder / "notes.tmp"
    mine.write_bytes(b"x")
    os.utime(mine, (two_hours_ago, two_hours_ago))
    disk_speed(folder, 16)
    assert not left.exists()
    assert running.exists() and mine.exists()
    assert sorted(p.name for p in folder.iterdir()) == [".strata-bench-fedcba9876543210fedcba9876543210.tmp",
                                                        "notes.tmp"]
