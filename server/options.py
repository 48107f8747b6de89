"""The options of `strata serve` for the server and the engine: one table, used for the command-line
flags, the TOML configuration file's keys and docs/configuration.md.

This module declares and converts single values; it does not merge sources (server/config.py does)
and it does not hold the conversation cache's options (server/cache/options.py declares those with
the same `Option` type). A TOML key is the long flag with `-` replaced by `_`.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strata.server import unread_answer

from strata import token_counts
from strata.token_counts import token_count

# The KV element types a user picks: `strata serve --kv-type`, `strata bench --kv-type` and the `kv_type`
# that `strata setup` writes. The one list; the others import it (bench's copy is pinned by a test until
# it imports this). The engine also has "f32", a precision reference for its own tests, not offered here.
KV_TYPES: tuple[str, ...] = ("f16", "q8_0")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the flag, key or variable."""


@dataclass(frozen=True)
class Option:
    """One option: `--name` on the command line, `name_with_underscores` in the TOML file."""

    name: str                      # long flag without the dashes, e.g. "slot-ctx"
    kind: type                     # int, float, str or bool
    default: Any
    help: str
    aliases: tuple[str, ...] = ()  # other long flags for the same value; two set differently is an error
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    metavar: str | None = None
    env: str | None = None         # an environment variable that sets it (below a flag, above the file)
    validator: Callable[[Any], str | None] | None = None   # returns what is wrong, or None
    token_count: bool = False      # an int that also reads 32k / 1m (x 1024), as models' contexts and the wizard say

    @classmethod
    def adopt(cls, spec: Any) -> Option:
        """Another part's option declaration (e.g. the cache's `OptionSpec`: name, type, default, help,
        aliases, choices, validator) as an `Option`."""
        if isinstance(spec, Option):
            return spec
        return cls(name=spec.name, kind=getattr(spec, "kind", None) or spec.type, default=spec.default,
                   help=spec.help, aliases=tuple(getattr(spec, "aliases", ()) or ()),
                   choices=getattr(spec, "choices", None), validator=getattr(spec, "validator", None))

    @property
    def key(self) -> str:
        return self.name.replace("-", "_")

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def convert(self, raw: Any, source: str) -> Any:
        """Converts and validates `raw`; `source` names where it came from for the error message."""
        if raw is None:
            return None
        value: Any
        try:
            if self.kind is bool:
                value = _to_bool(raw)
            elif self.kind is int:
                if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                    raise ValueError
                value = token_count(raw) if self.token_count else int(raw)
            elif self.kind is float:
                if isinstance(raw, bool):
                    raise ValueError
                value = float(raw)
            else:
                if not isinstance(raw, str):
                    raise ValueError
                value = raw
        except (TypeError, ValueError):
            wanted = token_counts.WANTED if self.token_count else self.kind.__name__
            raise ConfigError(f"{source}: expected {wanted}, got {raw!r}") from None
        if isinstance(value, float) and not math.isfinite(value):   # nan passes every minimum / maximum test
            raise ConfigError(f"{source}: expected a finite number, got {raw!r}")
        said = raw if isinstance(raw, float) else value   # a file's 1e300, not the int of 301 digits it makes
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(str(c) for c in self.choices)
            raise ConfigError(f"{source}: {value!r} is not one of {allowed}")
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{source}: {said!r} is below the minimum {_shown(self.minimum)}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{source}: {said!r} is above the maximum {_shown(self.maximum)}")
        if self.validator is not None:
            problem = self.validator(value)
            if problem:
                raise ConfigError(f"{source}: {problem}")
        return value


def _shown(limit: float) -> str:
    """16777216, not 1.67772e+07; 0.001 as it is."""
    return str(int(limit)) if float(limit).is_integer() else f"{limit:g}"


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(raw, str) and raw.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError


def _key_not_blank(key: str) -> str | None:
    """An empty key turned authentication off without a word: `--api-key "$KEY"` with KEY unset served every
    endpoint open to a user who believed it protected. Serving without a key is leaving the option out."""
    if key.strip():
        return None
    return ("an empty key would leave every endpoint open (was it a variable that is not set, as in --api-key "
            "\"$KEY\"?); give the key, or leave --api-key (and the file's api_key) out to serve without one")


def model_not_blank(model: str) -> str | None:
    """`--model "$MODEL"` with MODEL unset ran another model without a word (a session-39 trial); strata chat and
    bench say the same."""
    if model.strip():
        return None
    return ("empty (was it a variable that is not set, as in --model \"$MODEL\"?); give a GGUF file or the id "
            "`strata models` shows, or leave it out for the configured model (else the default one)")


def _host_problem(host: str) -> str | None:
    """An address that cannot be listened on, known before the model loads (a big model's load takes minutes,
    and then the server stopped with status 4): empty (`--host "$HOST"` with HOST unset: 'cannot listen on
    :8080'), or dotted numbers that are not an IPv4 address (`--host 999.1.1.1`). Names are left to the
    resolver: any name may be this machine's."""
    if not host.strip():
        return ("empty (was it a variable that is not set, as in --host \"$HOST\"?); give an address of this "
                "machine, such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface), or leave it out")
    parts = host.split(".")
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return (f"{host!r} is not an IPv4 address (each of its four numbers is 0 to 255); give an address "
                    "of this machine, such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)")
    return None


# Above these the engine's C int arguments overflow and it refused with pybind11's "incompatible constructor
# arguments" (--no-memory-check); 2**24 tokens is also the most a cache snapshot holds (engine/snapshot.py).
MAX_CONTEXT_TOKENS = 1 << 24
MAX_THREADS = 4096

# The server's and the engine's options. Defaults are the product's; docs/configuration.md lists them.
OPTIONS: tuple[Option, ...] = (
    Option("model", str, None, "GGUF model file, or the id `strata models` shows (default: the bundled "
           "SmolLM2-135M-Instruct)", metavar="PATH", validator=model_not_blank),
    Option("ctx", int, 8192, "context size of the main context (it serves a request that runs alone, and "
           "every request with --batch 0), in tokens (32k = 32768)", minimum=16, maximum=MAX_CONTEXT_TOKENS,
           token_count=True),
    Option("batch", int, 4, "number of batch slots (contexts for requests that run while others are in "
           "flight); 0 = the main context only, one request at a time", minimum=0, maximum=256),
    Option("batch-groups", int, 1, "slots split into this many groups (units of load)", minimum=1, maximum=256),
    Option("slot-ctx", int, None, "context size of each slot, in tokens (default: --ctx)", minimum=16,
           maximum=MAX_CONTEXT_TOKENS, token_count=True),
    Option("threads", int, None, "compute threads (default: the engine's choice for this machine)", minimum=1,
           maximum=MAX_THREADS),
    Option("kv-type", str, "f16", "KV cache element type (q8_0: about half the memory of f16, slightly less "
           "exact)", choices=KV_TYPES),
    Option("backend", str, "cpu", "compute backend (auto: the GPU when this build has CUDA and one is present; "
           "docs/cuda.md)", choices=("cpu", "cuda", "auto")),
    Option("host", str, "127.0.0.1", "address to listen on (127.0.0.1: this machine only)",
           validator=_host_problem),
    Option("port", int, 8080, "TCP port to listen on (0: any free port)", minimum=0, maximum=65535),
    Option("api-key", str, None, "require this key as `Authorization: Bearer` or `x-api-key` on every endpoint "
           "but /health and /api/hello (health probes); an empty key is refused: leave it out to serve without one",
           env="STRATA_API_KEY", metavar="KEY",
           validator=_key_not_blank),
    Option("alias", str, None, "extra model names listed by GET /v1/models, comma-separated (any name is "
           "served by the loaded model anyway)", metavar="NAMES"),
    Option("max-body-mib", float, 16.0, "largest accepted request body, in MiB", minimum=0.001, maximum=1024),
    Option("body-idle-s", float, 30.0, "a request body that sends nothing for this many seconds is answered "
           "408 and its connection closed (a stalled client; a Content-Length larger than the body)",
           minimum=0.05, maximum=3600.0),
    Option("idle-connection-s", float, 75.0, "a connection with no request under way (none sent yet, headers "
           "never finished, or idle between requests) is closed after this many seconds", minimum=0.05,
           maximum=86400.0),
    Option("answer-unread-s", float, 60.0, "a streamed answer whose client takes none of it for this many "
           "seconds while more waits (a hung or suspended client) is ended and its connection closed, so the "
           "engine stops writing for nobody; a client that reads slowly, but reads, is never ended; 0: never, "
           "else at least 1", minimum=0.0, maximum=86400.0, validator=unread_answer.bound_problem),
    Option("queue", int, 64, "requests that may wait for a context; beyond that 503 with Retry-After",
           minimum=0, maximum=100000),
    Option("prefill-chunk", int, 512, "tokens of a prompt read per step, between the decode steps of other "
           "requests", minimum=1, maximum=65536),
    Option("prefill-slice-ms", float, 250.0, "while other requests are generating, a prompt is read in pieces "
           "of about this many milliseconds (at most --prefill-chunk tokens), so their streams keep moving; so are "
           "all prompts while an editor's code completion waits or runs, or came in the last 3 s",
           minimum=1.0, maximum=60000.0),
    Option("mixed-piece", int, 64, "while other requests are generating, this many prompt tokens are read in "
           "the same forward as their next tokens (the mixed step), fewer when --prefill-slice-ms holds fewer at "
           "the measured rate (a deep history reads slower); 0 reads prompt pieces and decode steps apart", minimum=0, maximum=65536),
    Option("prompt-order", str, "shortest-first", "which prompt a step reading several gives its tokens first: "
           "shortest-first reads the one with the fewest tokens left (an agent's side request before its long turn) "
           "and the others share what is left of --prefill-slice-ms; round-robin gives each its piece in turn",
           choices=("shortest-first", "round-robin")),
    Option("solo-slice-ms", float, 1000.0, "where there are batch slots, a prompt read with nothing else running "
           "is read in pieces of about this many milliseconds at the measured rate (at most --prefill-chunk, at "
           "least 128 tokens), so a request arriving meanwhile (an agent's side request) waits about that long to "
           "start; 0: whole --prefill-chunk pieces", minimum=0.0, maximum=60000.0),
    Option("decode-share", float, 0.5, "while requests generate beside a prompt being read (an agent's side request "
           "beside its long turn), the share of the time they get in steps of their own between the prompt's pieces "
           "(else one token per --prefill-slice-ms piece); the prompt keeps the rest. 0: one token per piece",
           minimum=0.0, maximum=0.9),
    Option("lookup-draft", int, None, "lookup decoding: tokens a step may guess from the conversation's own "
           "earlier text (code being edited, names), checked by the model in the same forward; the output is "
           "exactly what plain decoding gives, only sooner. 0 turns it off. Unset: 8, or 0 for a model with "
           "experts (there a guessed row reads experts of its own, so a check costs several decode steps)",
           minimum=0, maximum=31),
    Option("lookup-rows", int, 8, "lookup decoding only while at most this many requests generate (the more "
           "rows a step has, the more it is bound by arithmetic and the less guesses save)", minimum=1, maximum=256),
    Option("spm-infill", bool, False, "lay a code completion's prompt out suffix first (suffix-prefix-middle: "
           "[FIM_SUF]suffix[FIM_PRE]prefix[FIM_MID]), as llama.cpp's --spm-infill, for the models trained on that "
           "order; default prefix-suffix-middle"),
    Option("cache-reuse", int, 256, "llama.cpp's --cache-reuse, for code completions only: runs of at least "
           "this many tokens of a context's history that come next in a completion's prompt (after its typed "
           "tokens) are moved into place, their keys re-rotated, instead of read again (the suffix after the cursor "
           "at each keystroke, the rest of the prefix when the editor's window slides); an approximation a fresh "
           "read would not give exactly. 0 turns it off", minimum=0, maximum=1 << 20),
    Option("max-tokens-default", int, 4096, "output limit of a request that sets none (Anthropic requires one)",
           minimum=1),
    Option("timeline-out", str, None, "append a replay timeline of real traffic (ids, times, token counts; no "
           "text) to this JSONL file, for `strata replay`", metavar="PATH"),
    Option("memory-check", bool, True, "before loading, refuse contexts whose KV would take more than 90 percent "
           "of the memory available (the engine backs all of it at start: such a load swaps or is killed), and "
           "read the weights in place (--no-pack-weights) when their packed copy would not fit beside the KV; "
           "--no-memory-check skips it (swap you trust)"),
    Option("pack-weights", bool, True, "on the CPU, keep row-interleaved copies of the Q8_0 / Q4_1 / IQ4_NL / "
           "Q4_K / Q5_K / Q6_K / Q3_K / Q2_K / IQ4_XS weights (AVX-512 VNNI builds; AVX2 builds: the Q8_0 / Q4_1 / "
           "IQ4_NL / Q4_K / Q5_K / Q6_K ones): about 1.8x faster prompt reading, memory about those weights' size; "
           "--no-pack-weights reads every weight in place from the file"),
    Option("status-line", bool, False, "show a live one-line status on stderr (only when it is a terminal)"),
    Option("stop-on-stdin-eof", bool, False, "stop cleanly when standard input closes (how the app asks its "
           "server to stop on every platform; Windows has no SIGTERM)"),
    Option("log-level", str, "info", "log level", choices=("debug", "info", "warning", "error")),
)


# Other local servers' spellings of these options (llama.cpp's llama-server), for the "did you mean" hint
# of an unknown flag or key. Not accepted as aliases: several mean something else here (llama.cpp's
# --batch-size is tokens per step, Strata's --batch is slots).
FLAG_SYNONYMS: dict[str, str] = {
    "-m": "--model", "-c": "--ctx", "--ctx-size": "--ctx", "-np": "--batch", "--parallel": "--batch",
    "-t": "--threads", "-tb": "--threads", "--threads-batch": "--threads", "-b": "--prefill-chunk",
    "--batch-size": "--prefill-chunk", "-ctk": "--kv-type", "-ctv": "--kv-type", "--cache-type-k": "--kv-type",
    "--cache-type-v": "--kv-type", "-ngl": "--backend cuda", "--n-gpu-layers": "--backend cuda",
    "--gpu-layers": "--backend cuda", "-a": "--alias", "-n": "--max-tokens-default", "--n-predict":
    "--max-tokens-default", "--verbose": "--log-level debug", "-v": "--log-level debug",
    "-ub": "--prefill-chunk", "--ubatch-size": "--prefill-chunk",
}

# llama-server's flags for what Strata always does, or does not do at all: the hint says which, so that a
# pasted llama-server command line shows what to drop instead of 'unrecognized arguments' alone (or a wrong
# "did you mean": --slots is not --slot-ctx).
_ALWAYS = "not needed here: "
_NEVER = "not offered: "
_SAMPLING = _NEVER + "each request sets its own sampling (temperature, top_p, ... in its body: docs/api.md)"
_DOWNLOAD = _NEVER + "Strata downloads nothing; give --model a GGUF file on this machine (`strata models` lists them)"
_MAPPED = _ALWAYS + "the model file is always memory-mapped (the engine's packed weight copies: --pack-weights)"
_TEMPLATE = _NEVER + "Strata renders the model file's own chat template (docs/chat-and-models.md)"
_BATCHING = _ALWAYS + "requests in flight always decode together in the batch slots (--batch)"
FLAG_REASONS: dict[str, str] = {
    "--jinja": _ALWAYS + "the model file's own chat template is always rendered (Jinja2)",
    "--chat-template": _TEMPLATE, "--chat-template-file": _TEMPLATE,
    "-fa": _ALWAYS + "Strata's attention has no switch", "--flash-attn": _ALWAYS + "Strata's attention has no switch",
    "-cb": _BATCHING, "--cont-batching": _BATCHING,
    "--metrics": _ALWAYS + "GET /metrics is always served",
    "--slots": _ALWAYS + "GET /v1/slots is always served (--slot-ctx sets a slot's context)",
    "--mlock": _MAPPED, "--no-mmap": _MAPPED, "--mmap": _MAPPED,
    "--no-webui": _ALWAYS + "Strata serves no web page (`strata monitor` is its window)",
    "-hf": _DOWNLOAD, "--hf-repo": _DOWNLOAD, "--hf-file": _DOWNLOAD, "-mu": _DOWNLOAD, "--model-url": _DOWNLOAD,
    "--temp": _SAMPLING, "--temperature": _SAMPLING, "--top-k": _SAMPLING, "--top-p": _SAMPLING,
    "--min-p": _SAMPLING, "--repeat-penalty": _SAMPLING, "--seed": _SAMPLING,
}


def add_flags(parser: argparse.ArgumentParser, options: tuple[Option, ...], title: str) -> None:
    """Adds one `--flag` per option (and its aliases). Unset flags stay None so that a flag overrides the
    file only when given; the stored name is `flag__<key>` for each spelling, merged by config.py."""
    group = parser.add_argument_group(title)
    for opt in options:
        # no "[default: ]" for an empty string: the help text says what empty means
        default_text = "" if opt.default in (None, "") else f" [default: {opt.default}]"
        for i, name in enumerate(opt.names()):
            dest = "flag__" + name.replace("-", "_")
            env_text = f" (also ${opt.env})" if opt.env else ""   # below a flag, above the file: --help says so
            help_text = (opt.help + env_text + default_text) if i == 0 else f"alias of --{opt.name}"
            if opt.kind is bool:
                group.add_argument(f"--{name}", dest=dest, action="store_const", const=True, default=None,
                                   help=help_text)
                group.add_argument(f"--no-{name}", dest=dest, action="store_const", const=False,
                                   help=argparse.SUPPRESS)
            else:
                choices = "{" + ",".join(str(c) for c in opt.choices) + "}" if opt.choices else None
                group.add_argument(f"--{name}", dest=dest, default=None,
                                   metavar=opt.metavar or choices or (token_counts.METAVAR if opt.token_count else
                                                                      opt.kind.__name__.upper()),
                                   help=help_text)
