"""`strata serve --model` and `strata models` on a real tiny model damaged one way each (tensor data cut
short, a tensor offset past the end, a string length of 2**62, an array count of 2**60, a tensor name
given twice, tensor type ids out of range, counts no file holds, metadata sizes no model has): serve
stops before listening with status 3 (MODEL_NOT_LOADED: the app does not restart it) and one line naming the defect; models lists the file as
unreadable and says why; never a traceback, a core dump or std::bad_alloc. Not here: the GGUF reader
on every byte and field (tests/gguf), a missing file or a folder (tests/server/test_start_up_mistakes.py).
"""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from strata.exit_status import MODEL_NOT_LOADED

_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def layout(data: bytes) -> tuple[dict, dict, int]:
    """Where a GGUF v3 file's fields are: {key: value offset}, {tensor name: (name offset, type offset,
    data-offset offset, dims)}, and where the tensor table ends."""
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def skip(t: int, p: int) -> int:
        if t == 8:                                          # string: u64 length + bytes
            return p + 8 + struct.unpack_from("<Q", data, p)[0]
        if t == 9:                                          # array: u32 type + u64 count + elements
            et, count = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(count):
                p = skip(et, p)
            return p
        return p + _SCALAR_BYTES[t]

    kvs = {}
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + n].decode()
        (t,) = struct.unpack_from("<I", data, pos + 8 + n)
        kvs[key] = pos + 12 + n
        pos = skip(t, pos + 12 + n)
    tensors = {}
    for _ in range(n_tensors):
        name_at = pos
        (n,) = struct.unpack_from("<Q", data, pos)
        name = data[pos + 8:pos + 8 + n].decode()
        (n_dims,) = struct.unpack_from("<I", data, pos + 8 + n)
        dims = struct.unpack_from(f"<{n_dims}Q", data, pos + 12 + n)
        type_at = pos + 12 + n + 8 * n_dims
        tensors[name] = (name_at, type_at, type_at + 4, dims)
        pos = type_at + 12
    return kvs, tensors, pos


def patched(data: bytes, at: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def damaged_models(data: bytes) -> dict[str, tuple[bytes, str]]:
    """name -> (file bytes, what the error must say)."""
    kvs, tensors, table_end = layout(data)
    k = tensors["blk.0.attn_k.weight"]
    twice = bytearray(data)
    twice[k[0] + 8:k[0] + 8 + len("blk.0.attn_q.weight")] = b"blk.0.attn_q.weight"   # k's name, q's text
    embd = tensors["token_embd.weight"]
    return {
        "tensor data cut short": (data[: table_end + (len(data) - table_end) // 2], "runs past the end of the file"),
        "cut inside the tensor table": (data[: table_end - 7], "truncated file"),
        "a tensor offset past the end": (patched(data, tensors["output.weight"][2], "<Q", 4 * len(data)),
                                         "tensor 'output.weight' data"),
        "a string length of 2**62": (patched(data, kvs["general.architecture"], "<Q", 2**62),
                                     "metadata 'general.architecture': absurd string length 4611686018427387904"),
        "an array count of 2**60": (patched(data, kvs["tokenizer.ggml.tokens"] + 4, "<Q", 2**60),
                                    "metadata 'tokenizer.ggml.tokens': array of 1152921504606846976 strings"),
        "a tensor name given twice": (bytes(twice), "duplicate tensor name 'blk.0.attn_q.weight'"),
        "tensor type id 200": (patched(data, embd[1], "<I", 200), "tensor 'token_embd.weight': unknown tensor type id 200"),
        "tensor type id 4 (a removed type)": (patched(data, embd[1], "<I", 4), "unknown tensor type id 4"),
        "a tensor count of 2**40": (patched(data, 8, "<Q", 2**40), "absurd tensor count 1099511627776"),
        "a metadata count of 2**40": (patched(data, 16, "<Q", 2**40), "absurd metadata count 1099511627776"),
        "a block count of 2**31": (patched(data, kvs["llama.block_count"], "<I", 2**31), "absurd model size in metadata"),
        "zero heads": (patched(data, kvs["llama.attention.head_count"], "<I", 0), "non-positive size in metadata"),
        "the embedding's rows doubled": (patched(data, embd[0] + 8 + len("token_embd.weight") + 12, "<Q", embd[3][1] * 2),
                                         "vocab_size 512 disagrees with token_embd rows 1024"),
        "zero bytes": (b"", "truncated file: magic needs 4 bytes"),
    }


CRASH_SIGNS = ("Traceback", "bad_alloc", "core dumped", "Segmentation", "Aborted", "terminate called")


@pytest.fixture(scope="module")
def damaged(tiny_model_factory, tmp_path_factory):
    data = tiny_model_factory(ctx_len=2048, n_vocab=512, seed=3).read_bytes()
    folder = tmp_path_factory.mktemp("damaged_models")
    out = {}
    for i, (name, (raw, says)) in enumerate(damaged_models(data).items()):
        path = folder / f"damaged-{i}.gguf"
        path.write_bytes(raw)
        out[name] = (path, says)
    return folder, out


def strata(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_serve_stops_before_listening_naming_each_defect(damaged):
    _, models = damaged
    failures = []
    for name, (path, says) in models.items():
        try:
            done = strata("serve", "--no-config", "--model", str(path), "--port", "0", "--threads", "1",
                          "--ctx", "256", "--batch", "0", timeout=60)
        except subprocess.TimeoutExpired:
            failures.append(f"{name}: still running after 60 s (it loaded)")
            continue
        text = done.stdout + done.stderr
        if done.returncode != MODEL_NOT_LOADED or "the model could not be loaded: " not in text or says not in text:
            failures.append(f"{name}: status {done.returncode}, wanted {MODEL_NOT_LOADED} and {says!r}: {text[-400:]}")
        if any(sign in text for sign in CRASH_SIGNS) or "listening on" in text:
            failures.append(f"{name}: {text[-400:]}")
    assert not failures, "\n".join(failures)


def test_models_lists_each_damaged_file_as_unreadable_with_why(damaged):
    folder, models = damaged
    done = strata("models", "--dir", str(folder))
    text = done.stdout + done.stderr
    assert done.returncode == 0, text          # a listing: the readable models are still listed
    assert not any(sign in text for sign in CRASH_SIGNS), text
    for name, (path, says) in models.items():
        lines = [ln for ln in text.splitlines() if str(path) in ln]
        assert lines, f"{name}: {path} not listed"
        assert any(says in ln for ln in lines), f"{name}: {lines}"


def test_models_says_what_is_wrong_with_the_file_as_serve_does(damaged):
    """`strata models` said an unreadable file's error with the reader's class name ('error: PATH: GGUFError:
    GGUF PATH: bad magic ...'), a name of Strata's insides; serve says the reader's words alone."""
    folder, models = damaged
    text = folder / "notes.gguf"
    text.write_text("not a model\n")
    done = strata("models", "--dir", str(folder))
    assert done.returncode == 0, done.stderr
    assert "GGUFError" not in done.stdout + done.stderr, done.stdout
    cut = models["tensor data cut short"][0]
    assert f"error: {text}: GGUF {text}: bad magic (not a GGUF file) (give a .gguf model file" in done.stdout, done.stdout
    assert any(ln.startswith(f"error: {cut}: GGUF {cut}: ") and ln.endswith("download it again)")
               for ln in done.stdout.splitlines()), done.stdout


@pytest.mark.parametrize("command", [("serve", "--no-config", "--port", "0", "--threads", "1", "--ctx", "256"),
                                     ("chat", "--ctx", "256"), ("bench", "--quick"),
                                     ("setup", "--yes", "--skip-bench", "--config", "{folder}/c.toml")])
def test_each_command_says_what_to_do_about_a_cut_short_file_or_one_that_is_not_gguf(damaged, command):
    """A download cut short: download it again; a file that is not GGUF: give a .gguf file (they named the
    defect and stopped there, leaving the user to guess what to do). Each stops with serve's status for a model
    it cannot load, MODEL_NOT_LOADED (chat, bench and setup stopped with 1)."""
    folder, models = damaged
    args = [a.format(folder=folder) for a in command]
    cut = strata(*args, "--model", str(models["tensor data cut short"][0]), timeout=60)
    assert cut.returncode == MODEL_NOT_LOADED and "download it again" in cut.stderr + cut.stdout, cut.stderr
    text = folder / "notes.gguf"
    text.write_text("not a model\n")
    wrong = strata(*args, "--model", str(text), timeout=60)
    assert wrong.returncode == MODEL_NOT_LOADED, wrong.stderr
    assert "give a .gguf model file" in wrong.stderr + wrong.stdout or "not a GGUF file" in wrong.stderr, wrong.stderr


def test_models_lists_files_whose_metadata_values_have_the_wrong_type(tiny_model_factory, tmp_path):
    """Well-formed files with a value of a type no model has (GGUF fuzzing found each): `strata models`
    crashed with a TypeError in its table (a name or architecture that is not a string) and listed a file
    whose context length or file type is not an integer as unreadable with a bare ValueError / TypeError.
    Each is listed, the odd value shown as '-', what the engine thinks of it said once."""
    from tests.fixtures.gguf_bytes import ARRAY, FLOAT32, INT32, STRING, UINT32, Val
    from tests.fixtures.gguf_rewrite import rewrite_metadata

    src = tiny_model_factory(n_vocab=512, seed=3)
    crafted = {
        "name-is-a-number": {"general.name": Val(UINT32, 7)},
        "name-is-an-array": {"general.name": Val(ARRAY, [1, 2], INT32)},
        "arch-is-a-float": {"general.architecture": Val(FLOAT32, 1.5)},
        "ctx-is-a-string": {"llama.context_length": Val(STRING, "4096")},
        "ctx-is-nan": {"llama.context_length": Val(FLOAT32, float("nan"))},
        "file-type-is-an-array": {"general.file_type": Val(ARRAY, [], INT32)},
        "file-type-is-a-string": {"general.file_type": Val(STRING, "Q4_K_M")},
        "tokens-is-a-number": {"tokenizer.ggml.tokens": Val(UINT32, 512)},
    }
    for name, changes in crafted.items():
        rewrite_metadata(src, tmp_path / f"{name}.gguf", changes)
    for flag in ((), ("--json",)):
        done = strata("models", "--dir", str(tmp_path), *flag)
        text = done.stdout + done.stderr
        assert done.returncode == 0, text
        assert not any(sign in text for sign in CRASH_SIGNS), text
        for name in crafted:
            assert f"{name}.gguf" in text, f"{name}: not listed: {text}"
    done = strata("models", "--dir", str(tmp_path))
    text = done.stdout
    assert "unreadable" not in text, text   # each file reads; the engine may refuse to run some
    assert "metadata 'general.architecture' is not a string" in text, text
    assert "metadata 'llama.context_length' is not an integer" in text, text
    assert "tokenizer.ggml.tokens is not an array of strings (it is an int)" in text, text
