"""ChatSession on the real engine and the default model: prefix reuse between turns, streaming, stops.

Skipped while the build has no Engine (strata.engine.Engine).
"""

from __future__ import annotations

import io

import pytest
from strata.engine.chat import ChatSession, common_prefix_len

from .conftest import parity_cases


def test_common_prefix_len():
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


@pytest.fixture(scope="module")
def engine(default_model_path):
    engine_module = pytest.importorskip("strata.engine")
    if not hasattr(engine_module, "Engine"):
        pytest.skip("strata.engine has no Engine yet")
    return engine_module.Engine(str(default_model_path), n_ctx=512, n_threads=2)


def test_second_turn_reads_only_the_new_turn(engine):
    session = ChatSession(engine, max_tokens=6)
    streamed: list[str] = []
    first = session.turn("Name a color.", on_text=streamed.append)
    assert first.reused_tokens == 0 and first.prefill_tokens == first.prompt_tokens
    assert first.generated_tokens > 0
    assert "".join(streamed) == session.messages[-1]["content"]
    assert session.messages[-1]["role"] == "assistant"
    second = session.turn("And another one?")
    # everything up to the first answer is kept; only the end of the answer and the new turn are read
    assert second.reused_tokens >= first.prompt_tokens
    assert second.prefill_tokens < second.prompt_tokens - first.prompt_tokens
    assert engine.context_tokens(0)[: second.prompt_tokens] == engine.tokenize(
        engine.apply_chat_template(session.messages[:-1]), special=True)


def test_greedy_answer_matches_llamacpp(engine):
    case = next(c for c in parity_cases() if c["name"] == "chat_hello")
    session = ChatSession(engine, max_tokens=16)
    stats = session.turn(case["messages"][0]["content"])
    want = case["greedy"][:16]
    eot = set(engine.eos_token_ids)
    if any(t in eot for t in want):
        want = want[: next(i for i, t in enumerate(want) if t in eot)]
    assert session.last_answer == want
    assert stats.generated_tokens == len(want)


def test_reset_and_too_long_conversation(engine):
    session = ChatSession(engine, system="Be brief.", max_tokens=2)
    session.turn("hi")
    session.reset()
    assert session.messages == [{"role": "system", "content": "Be brief."}]
    with pytest.raises(ValueError, match="the context holds 512"):
        session.turn("word " * 600)
    assert session.messages == [{"role": "system", "content": "Be brief."}]
    stats = session.turn("hi")
    assert stats.stop in ("eot", "length") and stats.generated_tokens <= 2


def test_interrupt_keeps_the_partial_answer(engine):
    session = ChatSession(engine, max_tokens=8)
    seen: list[str] = []

    def on_text(piece: str) -> None:
        seen.append(piece)
        raise KeyboardInterrupt

    stats = session.turn("Tell me a story.", on_text=on_text)
    assert stats.stop == "interrupted" and stats.generated_tokens == 1
    assert session.messages[-1] == {"role": "assistant", "content": seen[0]}
    assert session.turn("Go on.").reused_tokens > 0  # the conversation goes on normally


def test_cli_streams_and_prints_speeds(engine, default_model_path, monkeypatch, capsys):
    import io

    from strata.cli import main as strata_main

    monkeypatch.setattr("sys.stdin", io.StringIO("Say hi.\n\n/reset\nSay bye.\n/exit\nnever read\n"))
    code = strata_main(["chat", "--model", str(default_model_path), "--ctx", "512", "--threads", "2",
                        "--max-tokens", "4"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("[prefill ") == 2 and out.count("tok/s") == 4
    assert "(conversation cleared)" in out
    assert "llama, 2 threads" in out
    assert ">>> Say hi.\n" in out and ">>> Say bye.\n" in out    # piped lines show in the transcript


def test_cli_answers_a_command_it_does_not_have_instead_of_sending_it(engine, default_model_path, monkeypatch,
                                                                       capsys):
    """`/help` and `/clear` went to the model as messages (it answered `/help` in prose); a path is a message."""
    import io

    from strata.cli import main as strata_main

    monkeypatch.setattr("sys.stdin", io.StringIO("/help\n/clear\n/usr/bin/env?\n/exit\n"))
    code = strata_main(["chat", "--model", str(default_model_path), "--ctx", "512", "--threads", "2",
                        "--max-tokens", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert ">>> /help\n/reset starts over, /exit (or Ctrl-D) quits, /help lists these\n" in out
    assert ">>> /clear\nunknown command /clear: /reset starts over" in out
    assert out.count("[prefill ") == 1             # only the path was sent


def test_cli_warns_of_a_context_beyond_the_trained_one(tiny_model_factory, monkeypatch, capsys):
    import io

    from strata.cli import main as strata_main

    monkeypatch.setattr("sys.stdin", io.StringIO("/exit\n"))
    model = str(tiny_model_factory(ctx_len=256))
    assert strata_main(["chat", "--model", model, "--ctx", "1024", "--threads", "1"]) == 0
    assert "the context (1024 tokens) is larger than the 256 tokens the model was trained on" in capsys.readouterr().err
    assert strata_main(["chat", "--model", model, "--ctx", "256", "--threads", "1"]) == 0
    assert "trained on" not in capsys.readouterr().err


def test_cli_bad_arguments_are_named(capsys):
    from strata.cli import main as strata_main

    assert strata_main(["chat", "--ctx", "0"]) == 2
    assert "--ctx must be 1 to 16777216, got 0" in capsys.readouterr().err
    assert strata_main(["chat", "--temperature", "-1"]) == 2
    assert "temperature must be >= 0" in capsys.readouterr().err
    # serve's bounds: above them a pybind11 overflow traceback (threads) or a failed mmap's (ctx)
    assert strata_main(["chat", "--threads", "99999999999"]) == 2
    assert "strata chat: --threads must be 1 to 4096, got 99999999999" in capsys.readouterr().err
    assert strata_main(["chat", "--ctx", "99999999999"]) == 2
    assert "strata chat: --ctx must be 1 to 16777216, got 99999999999" in capsys.readouterr().err
    assert strata_main(["bench", "--threads", "99999999999"]) == 2
    assert "strata bench: --threads must be 1 to 4096, got 99999999999" in capsys.readouterr().err
    assert strata_main(["chat", "--max-tokens", "0"]) == 2          # a ValueError traceback after loading
    assert "strata chat: --max-tokens must be > 0, got 0" in capsys.readouterr().err
    assert strata_main(["chat", "--model", "/nonexistent.gguf", "--ctx", "64"]) == 3    # named before loading
    assert "--model /nonexistent.gguf: no such file" in capsys.readouterr().err
    # the API's bounds on top_k (a 400 below 0 or above 2**20); chat ran with -3 as 'all tokens'
    assert strata_main(["chat", "--top-k", "-3"]) == 2
    assert "strata chat: --top-k must be 0 to 1048576 (0: all), got -3" in capsys.readouterr().err
    assert strata_main(["chat", "--top-k", "99999999999"]) == 2
    assert "strata chat: --top-k must be 0 to 1048576 (0: all), got 99999999999" in capsys.readouterr().err


def test_cli_chats_with_the_model_strata_setup_chose(tiny_model_factory, tmp_path, monkeypatch, capsys):
    """Without --model, the `model` of the file `strata serve` reads ($STRATA_CONFIG here): after `strata
    setup` picked a model, `strata chat` ran the bundled one. --model still wins; a file that is not TOML is
    named; a file without `model` leaves the default."""
    import io

    from strata.cli import main as strata_main

    model = str(tiny_model_factory(ctx_len=256))
    config = tmp_path / "config.toml"
    config.write_text(f'model = "{model}"\nctx = 256\n')
    monkeypatch.setenv("STRATA_CONFIG", str(config))
    monkeypatch.setattr("sys.stdin", io.StringIO("/exit\n"))
    assert strata_main(["chat", "--ctx", "128", "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"{model} (the model of {config}): llama, 1 thread, backend")
    monkeypatch.setattr("sys.stdin", io.StringIO("/exit\n"))
    other = str(tiny_model_factory(ctx_len=128))
    assert strata_main(["chat", "--model", other, "--ctx", "128", "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"{other}: llama")
    config.write_text("model = \n")
    assert strata_main(["chat", "--ctx", "128"]) == 2
    assert f"strata chat: {config}: " in capsys.readouterr().err
    config.write_text("ctx = 256\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("/exit\n"))
    assert strata_main(["chat", "--ctx", "128", "--threads", "1"]) == 0
    assert "SmolLM2-135M-Instruct" in capsys.readouterr().out.splitlines()[0]


def test_cli_refuses_a_configured_model_that_is_not_text(tmp_path, monkeypatch, capsys):
    """`model = 5` (or a list) in the file `strata serve` reads: serve refuses it naming the key, chat ran the
    default model without a word, so a user who set a model chatted with another."""
    from strata.cli import main as strata_main

    config = tmp_path / "config.toml"
    monkeypatch.setenv("STRATA_CONFIG", str(config))
    for raw, shown in (("5", "5"), ('["a.gguf"]', "['a.gguf']"), ("true", "True")):
        config.write_text(f"model = {raw}\n")
        monkeypatch.setattr("sys.stdin", io.StringIO("/exit\n"))
        assert strata_main(["chat", "--ctx", "64", "--threads", "1"]) == 2, raw
        captured = capsys.readouterr()
        assert f"strata chat: {config}: model: expected str, got {shown}" in captured.err, captured
        assert "loaded in" not in captured.out


def test_cli_refuses_a_model_whose_chat_template_is_unusable(tiny_model_factory, monkeypatch, capsys):
    """A template that does not parse no longer stops the model from loading (the server still serves
    /v1/completions), but `strata chat` can do nothing with it: it said 'Type a message', then answered every
    message with the error (about /v1/completions) and exited 0. It stops at the start, status 1, saying why."""
    import io

    from strata.cli import main as strata_main
    from tests.server.test_unusable_chat_template import BROKEN

    model = str(tiny_model_factory(ctx_len=256, n_vocab=512, seed=3, chat_template=BROKEN))
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\n/exit\n"))
    assert strata_main(["chat", "--model", model, "--ctx", "128", "--threads", "1"]) == 1
    out, err = capsys.readouterr()
    assert ">>>" not in out and "Type a message" not in out, out
    assert f"strata chat: cannot chat with {model}: the model's chat template is unusable (chat template does " \
           "not parse" in err, err


def test_a_turn_the_template_refuses_leaves_the_conversation_as_it_was(tiny_model_factory):
    """A message the template raises on (a template's raise_exception, as Gemma's on roles out of turn) stayed
    in the conversation, so every later turn failed the same way until /reset."""
    template = ("{% for m in messages %}{% if m['content'] == 'refused' %}{{ raise_exception('not this one') }}"
                "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    from strata.engine import Engine

    engine = Engine(str(tiny_model_factory(ctx_len=256, n_vocab=512, seed=4, chat_template=template)), n_ctx=256,
                    n_threads=1)
    session = ChatSession(engine, max_tokens=2)
    with pytest.raises(ValueError, match="not this one"):
        session.turn("refused")
    assert session.messages == []
    stats = session.turn("accepted")
    assert stats.generated_tokens > 0 and [m["content"] for m in session.messages][0] == "accepted"
