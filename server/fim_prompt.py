"""The prompt of a fill-in-the-middle (code completion) request, laid out as llama.cpp's server lays it out.

What it is: `fim_prompt(tokenizer, FimRequest)` -> the token ids and whether anything was cut. The order
(llama.cpp's `format_infill`, prefix-suffix-middle):

    [FIM_REP]myproject\\n                      (when the model has a repo token)
    [FIM_SEP]{filename}\\n{text}               (each input_extra chunk; without a separator token the chunk
                                              follows "\\n\\n--- snippet ---\\n\\n")
    [FIM_SEP]filename\\n                       (when the model has a separator token)
    [BOS]                                      (when the model adds one)
    [FIM_PRE]{input_prefix}{prompt}[FIM_SUF]{input_suffix}[FIM_MID]

or, with `strata serve --spm-infill` (llama.cpp's flag of that name: suffix-prefix-middle, for the models trained
on that order), the same pieces cut the same way, the suffix first:

    [BOS][FIM_SUF]{input_suffix}[FIM_PRE]{input_prefix}{prompt}[FIM_MID]

The prefix keeps its last 3/4 of FIM_BATCH tokens (a longer one loses its start in steps of PREFIX_CUT_STEP, so
that the start stays put as the user types on), the suffix its first FIM_BATCH/4 - 2 - len(prompt) (with
--spm-infill len(prompt) in steps of TYPED_ROOM_STEP, so that the suffix, read first, stays put); the
repo-level context keeps its last n_ctx - FIM_BATCH - 2 * n_predict tokens (none in a small context; n_ctx is
a slot's where the server has slots: fim_context), and fewer where the whole prompt would not be shorter than
n_ctx (n_predict 0 or -1 with a long prefix and suffix; llama.cpp's prompt then overflows its slot). Prefix,
suffix and context are read as plain text (special-token texts in a file stay text); `prompt` (the typed part
of the cursor's line, llama.vim's and llama.vscode's) with special tokens parsed, as llama.cpp reads it.
`/v1/completions` with a `suffix` is the same with `prompt` as the prefix.

Not here: the HTTP fields (infill_api.py, openai_completions.py), finding the tokens (strata.engine.fim).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strata.server.errors import APIError

# llama.cpp's default n_batch, which its /infill sizes the prefix and suffix by (prefix:suffix = 3:1)
FIM_BATCH = 2048
# tokens: a prefix longer than its 3/4 of FIM_BATCH loses its start in steps of this many, so that its first kept token
# stays put while the user types on. Cut one token at a time (llama.cpp's cut), the start moved at every line ended,
# and the next keystroke read everything after the repo-level part again: 2,048 tokens instead of ~510 in
# fim_beside_agent (2026-12-06), ~10 s on a loaded two-core machine. The prefix keeps 1,281 to 1,536 tokens.
PREFIX_CUT_STEP = 256
# tokens: with --spm-infill the suffix leaves room for the typed part (`prompt`) in steps of this many, at least one
# step. Sized by the typed part token by token (llama.cpp's), the suffix lost a token at nearly every keystroke, and
# since it comes first in that order everything after it, the whole prefix, was read again (~1,540 tokens a
# keystroke instead of the few typed; fim_beside_agent, 2026-12-06). A cursor's line is rarely longer than a step.
TYPED_ROOM_STEP = 64
REPO_NAME = "myproject\n"          # llama.cpp's fixed project name ("TODO: make project name an input")
CURRENT_FILE = "filename\n"        # and its fixed name of the file being edited
SNIPPET_HEADER = "\n\n--- snippet ---\n\n"   # a chunk's header where the model has no file separator


@dataclass(frozen=True)
class ExtraChunk:
    """One `input_extra` entry: another file's text (llama.vscode's ring buffer of recently seen chunks)."""

    filename: str
    text: str


@dataclass(frozen=True)
class FimRequest:
    prefix: str
    suffix: str
    prompt: str = ""
    extra: tuple[ExtraChunk, ...] = ()
    n_ctx: int = 0                 # the context the prompt must fit (the repo-level part is sized by it)
    n_predict: int = 0             # tokens the answer may take (-1: no limit: counted as 0, as llama.cpp)
    spm: bool = False              # suffix-prefix-middle order (--spm-infill)


@dataclass(frozen=True)
class FimPrompt:
    tokens: list[int]
    truncated: bool                # part of the prefix, the suffix or the repo-level context was left out


def no_fim_error(model: str, missing: Sequence[str], param: str | None = None) -> APIError:
    """The 400 of a completion request to a model without fill-in-the-middle tokens."""
    return APIError(400, f"model '{model}' has no fill-in-the-middle tokens (no {', '.join(missing)} token in its "
                         "vocabulary): code completion needs a code model that has them, such as Qwen2.5-Coder "
                         "or StarCoder2", param=param, code="fim_not_supported")


def laid_out_for_fim(tokens: Sequence[int], fim) -> bool:
    """Whether a prompt the client laid out itself is a fill-in-the-middle one: it holds the model's FIM prefix and
    suffix tokens and ends with its middle token (Continue's autocomplete templates through /v1/completions without
    a `suffix`: `<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`, the suffix-first order too). It is
    then a code completion as one with a `suffix` is (Job.completion, its FIM end tokens)."""
    return bool(fim.usable and tokens and tokens[-1] == fim.mid and fim.pre in tokens and fim.suf in tokens)


def fim_context(engine) -> int:
    """The context a completion's prompt is sized for (FimRequest.n_ctx): a slot's where the server has slots and
    they are smaller than main, as llama.cpp sizes its /infill by a slot's n_ctx. Sized by main's, the repo-level
    context filled main: such a prompt fits no slot, so beside an agent generating in main each keystroke waited
    for the agent's turn to end and then displaced its history from main."""
    n = engine.context_capacity(0)
    if int(getattr(engine, "n_slots", 0)) > 0:
        n = min(n, engine.context_capacity(1))
    return n


def kept_prefix(n: int) -> int:
    """How many of a prefix's `n` tokens are kept (its last ones): all up to 3/4 of FIM_BATCH, else that less the
    excess rounded up to PREFIX_CUT_STEP, so the first kept token is the same while the prefix grows within a step."""
    most = 3 * (FIM_BATCH // 4)
    if n <= most:
        return n
    return n - -(-(n - most) // PREFIX_CUT_STEP) * PREFIX_CUT_STEP


def typed_room(n: int, spm: bool) -> int:
    """The suffix's room left for a typed part of `n` tokens: `n` in the prefix-suffix-middle order (llama.cpp's: the
    suffix follows the typed part there, so it is read again at each keystroke anyway), with --spm-infill `n` rounded
    up to TYPED_ROOM_STEP, at least one step (the suffix then stays the same as a line is typed)."""
    if not spm:
        return n
    return max(1, -(-n // TYPED_ROOM_STEP)) * TYPED_ROOM_STEP


def fim_prompt(tokenizer, req: FimRequest) -> FimPrompt:
    """The layout above. Precondition: `tokenizer.fim.usable`."""
    fim = tokenizer.fim

    def plain(text: str) -> list[int]:
        return tokenizer.encode(text, special=False, add_bos=False)

    prompt = tokenizer.encode(req.prompt, special=True, add_bos=False) if req.prompt else []
    prefix, suffix = plain(req.prefix), plain(req.suffix)
    extra: list[int] = []
    if fim.rep is not None:
        extra += [fim.rep, *plain(REPO_NAME)]
    for chunk in req.extra:
        extra += [fim.sep, *plain(chunk.filename + "\n")] if fim.sep is not None else plain(SNIPPET_HEADER)
        extra += plain(chunk.text)
    if fim.sep is not None:
        extra += [fim.sep, *plain(CURRENT_FILE)]
    n_prefix = kept_prefix(len(prefix))
    n_suffix = min(len(suffix), max(0, FIM_BATCH // 4 - (2 + typed_room(len(prompt), req.spm))))
    # llama.cpp's budget for the repo-level part, and never past the context less one token: with n_predict 0 (a
    # warm-up) or -1, a whole prefix and suffix and the specials made the prompt n_ctx + 1 or 2, which fits no
    # slot, so it waited for main and displaced an agent's history there (what fim_context is for)
    n_rest = 3 + n_prefix + len(prompt) + n_suffix + int(bool(tokenizer.add_bos and tokenizer.bos_id is not None))
    n_extra = min(max(0, req.n_ctx - FIM_BATCH - 2 * max(req.n_predict, 0)), max(0, req.n_ctx - 1 - n_rest),
                  len(extra))
    truncated = n_prefix < len(prefix) or n_suffix < len(suffix) or n_extra < len(extra)
    head = extra[len(extra) - n_extra:]
    if tokenizer.add_bos and tokenizer.bos_id is not None:
        head.append(tokenizer.bos_id)
    before = [fim.pre, *prefix[len(prefix) - n_prefix:], *prompt]
    after = [fim.suf, *suffix[:n_suffix]]
    tokens = [*head, *after, *before, fim.mid] if req.spm else [*head, *before, *after, fim.mid]
    return FimPrompt(tokens=tokens, truncated=truncated)
