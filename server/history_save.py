"""A session saved by conversation: `POST /v1/sessions/{name}/save` with `messages` or `tokens` (the history), or
`conversation` (a key /v1/slots shows), instead of only a context.

Saving "whatever context N holds" saved another request's history when that request took the slot between the
answer and the save (the agent soak: 5 of 24 saves). Here the history is named by what it is: the messages
rendered as a chat request's prompt renders them (the last one may be the assistant's answer), or token ids. The
worker finds the context holding most of it (session_match.pick_holder: by tokens, not by key, since a key is
shared by side requests), else the conversation-cache entry it was parked to, read back into an idle context
first (session_match.pick_restore_context), and saves the part that matches. By `conversation` key: the contexts
labelled with it and the cache entries parked under it (session_match.pick_keyed). With `slot` as well, the slot must
still hold it: else a SlotTakenError (a 409), nothing saved.

Mechanism: rendering in the calling thread, the finding and saving on the scheduler's worker thread (the
SessionBackend's calls). The choices are session_match.py's; the save is the cache's (cache/sessions.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from strata.server import context_choice, session_match
from strata.server.cache.restoring import CacheHit
from strata.server.errors import APIError
from strata.server.slots import MAIN, common_prefix

log = logging.getLogger("strata.server.sessions")

# Retry-After of a save whose parked history no idle context can take now (each that would runs a request), or whose
# read-back the memory floors refuse now: as a save into a busy context is told (sessions_backend.IDLE_RETRY_AFTER_S)
READ_BACK_RETRY_AFTER_S = 5


class SlotTakenError(Exception):
    """The slot a guarded save names no longer holds the conversation (a 409): another request took it."""


class HistoryNotFoundError(LookupError):
    """No context and no cached conversation holds the history named (a 404): nothing saved."""


@dataclass(frozen=True)
class SaveTarget:
    """What a save's body names besides (or instead of) its slot; exactly one of the three is set. `body` is the
    whole body: the chat fields that shape a prompt's rendering (tools, chat_template_kwargs, prompt_cache_key)."""

    messages: list | None = None
    tokens: list | None = None
    conversation: str | None = None
    body: dict | None = None


@dataclass(frozen=True)
class Wanted:
    """The history to save as tokens; a holder must match at least `min_tokens` of it."""

    tokens: list[int]
    min_tokens: int
    conversation: str   # the key a request of this history runs under ("" when unknown)
    what: str           # for messages: "the history of 5 messages (812 tokens)"
    exact: bool = False  # token ids named by the client: matched as they are, never aligned (_aligned)


def wanted_of(engine: Any, target: SaveTarget) -> Wanted:
    """The history `target` names, as tokens (APIError 400 for messages a chat request could not send). Messages
    are rendered as a chat request renders its prompt; when the last is the assistant's answer, the prompt of the
    request that answered (all messages before it) must be held whole, and the answer as far as it matches (the
    model's own tokens of it may split otherwise than the text's: the next turn reuses that much, too)."""
    from strata.server import openai_api, prompting

    if target.tokens is not None:
        bad = [t for t in target.tokens if not 0 <= t < int(engine.n_vocab)]
        if bad:
            raise ValueError(f"'tokens' has ids outside the vocabulary (0..{int(engine.n_vocab) - 1}): {bad[:5]}")
        toks = [int(t) for t in target.tokens]
        return Wanted(toks, len(toks), prompting.tokens_key(toks), f"these {len(toks)} token ids", exact=True)
    body = target.body or {}
    messages = openai_api.parse_messages(target.messages)
    tools = openai_api.parse_tools(body)
    shown, variables = openai_api.prompt_tools_and_variables(engine, body, messages, tools)
    tokens = prompting.render_chat(engine, messages, shown, template_vars=variables)
    need = len(tokens)
    if messages[-1]["role"] == "assistant" and len(messages) > 1:
        need = len(prompting.render_chat(engine, messages[:-1], shown, template_vars=variables))
    return Wanted(tokens, max(1, min(need, len(tokens))), openai_api.conversation_of(body, messages),
                  f"the history of {len(messages)} messages ({len(tokens)} tokens)")


# ----- worker thread -----

def _aligned(sched: Any, cache: Any, wanted: Wanted) -> Wanted:
    """Messages' tokens as a context or a parked conversation holds the same bytes (as an arriving prompt is
    aligned: context_choice.aligned_with_histories): since session 35 a history keeps the model's own tokens for
    every answer sent back as text, so the messages rendered canonically parted from it at the first answer's first
    split and a save of a conversation whose answers the model split otherwise found it nowhere (a 404).
    `min_tokens` moves to where the same bytes end in the aligned tokens. Token ids (`exact`) are matched as named."""
    if wanted.exact:
        return wanted
    tokenizer = getattr(sched.engine, "tokenizer", None)
    found = context_choice.aligned_with_histories(sched.table, tokenizer, wanted.tokens, cache)
    if found is None:
        return wanted
    out = found[0]
    token_bytes = tokenizer.token_bytes
    j = out.held_after                                   # out.prompt = history[:j] + wanted.tokens[m:]
    m = j + len(wanted.tokens) - len(out.prompt)
    n = wanted.min_tokens
    if n >= m:
        need = n + j - m
    else:                                                # inside the aligned bytes: the tokens that hold as many
        target, have, need = sum(len(token_bytes(t)) for t in wanted.tokens[:n]), 0, 0
        while have < target:
            have += len(token_bytes(out.prompt[need]))
            need += 1
    return Wanted(out.prompt, max(1, need), wanted.conversation, wanted.what)


def save_found(sched: Any, cache: Any, name: str, wanted: Wanted) -> dict:
    """Saves the history from the context holding most of it, else from the cache entry it was parked to (read
    back into an idle context first). HistoryNotFoundError when none holds `wanted.min_tokens` of it."""
    wanted = _aligned(sched, cache, wanted)
    holders = [session_match.Holder("context", c.id, c.matched_by(wanted.tokens), _label(c.id))
               for c in sched.table.contexts if c.valid and c.tokens]
    entry_tokens = {}
    for level, key, matched, n_entry in cache.history_holders(wanted.tokens):
        holders.append(session_match.Holder(level, key, matched, f"{level} cache entry {key[:12]}"))
        entry_tokens[(level, key)] = n_entry
    choice = session_match.pick_holder(holders, wanted.min_tokens)
    h = choice.holder
    if h is None:
        raise HistoryNotFoundError(f"{wanted.what} is not held here: {choice.reason}; nothing saved")
    if h.source == "context":
        return _saved(cache.save_session(name, int(h.ref), h.matched), int(h.ref), "context", choice.reason)
    ctx, restore_reason = _read_back(sched, cache, name, h, wanted, entry_tokens[(h.source, h.ref)])
    info = cache.save_session(name, ctx, len(sched.table[ctx].tokens))
    return _saved(info, ctx, h.source, f"{choice.reason}; read back into {restore_reason}")


def save_by_key(sched: Any, cache: Any, name: str, key: str) -> dict:
    """Saves the history of conversation `key`: the contexts labelled with it and the cache entries parked under it
    (their sidecars record it) hold it, and the one holding the most is saved (session_match.pick_keyed); an entry
    is read back into an idle context first, as a save by messages reads one. Contexts labelled with it that went
    different ways (side requests under one key) are a 409 asking for the messages."""
    holders = [session_match.KeyedHolder("context", c.id, c.tokens[:c.approx_from], _label(c.id))
               for c in sched.table.contexts if c.valid and c.tokens and c.conversation == key]
    holders += [session_match.KeyedHolder(level, ref, tokens, f"{level} cache entry {ref[:12]}", parked_at)
                for level, ref, tokens, parked_at in cache.conversation_holders(key)]
    choice = session_match.pick_keyed(holders)
    h = choice.holder
    if choice.conflict:
        raise SlotTakenError(f"conversation {key!r} is held by "
                             f"{', '.join(x.label for x in holders if x.source == 'context')} with histories that "
                             "went different ways (side requests under one key): name it by its messages; nothing "
                             "saved")
    if h is None:
        raise HistoryNotFoundError(f"no context or parked conversation holds conversation {key!r} (one parked before "
                                   "Strata recorded conversation keys has none: name it by its messages); nothing "
                                   "saved")
    reason = f"{h.label} holds conversation {key!r}" if h.source == "context" else choice.reason
    if h.source == "context":
        return _saved(cache.save_session(name, int(h.ref), exact_tokens(sched.table[int(h.ref)])), int(h.ref),
                      "context", reason)
    tokens = list(h.tokens)
    wanted = Wanted(tokens, len(tokens), key, f"conversation {key!r} ({len(tokens)} tokens)")
    found = session_match.Holder(h.source, h.ref, len(tokens), h.label)
    ctx, restore_reason = _read_back(sched, cache, name, found, wanted, len(tokens))
    info = cache.save_session(name, ctx, len(sched.table[ctx].tokens))
    return _saved(info, ctx, h.source, f"{reason}; read back into {restore_reason}")


def save_guarded(sched: Any, cache: Any, name: str, ctx: int, wanted: Wanted | None, key: str | None) -> dict:
    """Saves context `ctx` (idle) only if it still holds the conversation: its key `key`, or `wanted` (at least
    its min_tokens; the part that matches is saved). SlotTakenError when it does not: nothing saved."""
    c = sched.table[ctx]
    if key is not None:
        if c.conversation != key:
            raise SlotTakenError(f"{_label(ctx)} holds conversation {c.conversation or 'none'!r}, not {key!r}: "
                                 "another request took it since; nothing saved")
        return _saved(cache.save_session(name, ctx, exact_tokens(c)), ctx, "context",
                      f"{_label(ctx)} holds conversation {key!r}")
    matched = c.matched_by(wanted.tokens) if c.valid else 0
    if matched < wanted.min_tokens:
        raise SlotTakenError(f"{_label(ctx)} holds only the first {matched} tokens of {wanted.what} (at least "
                             f"{wanted.min_tokens} needed): another request took it since; nothing saved (save by "
                             "the messages without a slot to find where it is now)")
    return _saved(cache.save_session(name, ctx, matched), ctx, "context", f"{_label(ctx)} holds {matched} tokens")


def _read_back(sched: Any, cache: Any, name: str, h: session_match.Holder, wanted: Wanted,
               entry_tokens: int) -> tuple[int, str]:
    """Restores the matched part of cache entry `h` (of `entry_tokens`) into an idle context, for the save of `name`;
    (that context, why it). A save the sessions folder's budget refuses is refused before: nothing displaced."""
    table = sched.table
    reserved = {ctx for _, _, ctx in getattr(sched, "_deferred", []) if ctx is not None}   # a session call's next
    # what each context can take of the entry: an entry longer than a context restores whole snapshot chunks there
    # only (a slot of 600 tokens took 512 of a 1,000-token entry, and a save of its first 550 was a 404 beside an
    # idle main)
    views = [session_match.ContextView(c.id, cache.restorable_tokens(entry_tokens, h.matched, c.id),
                                       c.busy_job is None, c.id in reserved, c.blank, c.last_use, c.id == MAIN)
             for c in table.contexts]
    where = session_match.pick_restore_context(views, h.matched)
    if where.ctx is None:
        # a 503 to retry, not a MemoryError: the handler said "not enough RAM to save", and RAM had no part in it
        raise APIError(503, f"{wanted.what} was parked to the {h.source} cache and {where.reason}; nothing saved, "
                       "retry later", headers={"Retry-After": str(READ_BACK_RETRY_AFTER_S)})
    ctx = where.ctx
    # the budget is weighed before the context's history is parked and overwritten: a 507 after the read back had
    # displaced what that idle context held for a save that was never going to be written
    cache.check_session_room(name, h.matched)
    hit = CacheHit(h.source, str(h.ref), h.matched, h.matched, "a session save by conversation")
    with cache.holding(hit):   # the park below may hand entries down or delete the oldest: not this one
        sched.park_to_cache(ctx, "overwritten by a session save's read-back")
        try:
            result = cache.restore(hit, ctx, stop=lambda: sched.stopping, for_save=True)
        except Exception:   # the context's KV is unknown now: empty, as a request's failed restore leaves it
            sched.engine.truncate(ctx, 0)
            table.set_tokens(ctx, [])
            raise
    if result.untouched:   # the entry went meanwhile, or was refused: the context holds what it held
        if any(key == h.ref for _, key, _, _ in cache.history_holders(wanted.tokens)):
            # refused, not gone (a disk read under the memory floors: RAM short now): held, so a retry may save it;
            # a 404 told the client it was gone
            raise APIError(503, f"{wanted.what} was parked to the {h.source} cache, but reading it back was refused "
                           f"now ({result.reason}); nothing saved, retry later",
                           headers={"Retry-After": str(READ_BACK_RETRY_AFTER_S)})
        raise HistoryNotFoundError(f"{wanted.what} was parked to the {h.source} cache, but {result.reason}; "
                                   "nothing saved")
    tokens = list(sched.engine.context_tokens(ctx))
    n = min(result.n_tokens, common_prefix(tokens, wanted.tokens))
    sched.engine.truncate(ctx, n)
    table.set_tokens(ctx, tokens[:n])
    table[ctx].conversation = wanted.conversation if n else ""
    # a prefix of the entry it came from, which stays: parking it again keeps it twice. Not a damaged entry's valid
    # prefix (the ladder): that entry was deleted, and what the context holds is the conversation's only copy
    table[ctx].parked = n > 0 and not result.ladder
    log.info("%d tokens of %s read back from the %s cache into %s for a session save (%s)", n, wanted.what,
             h.source, _label(ctx), result.reason)
    if n < wanted.min_tokens:
        raise HistoryNotFoundError(f"{wanted.what} was parked to the {h.source} cache, but only {n} of its tokens "
                                   f"could be read back ({result.reason}); nothing saved")
    return ctx, where.reason


def exact_tokens(c: Any) -> int | None:
    """How much of context `c`'s history a session may save: all (None), or what precedes the KV a code completion
    moved into place (--cache-reuse: an approximation, ContextState.approx_from), which a restore would take as
    exact. HistoryNotFoundError when nothing precedes it."""
    if c.approx_from is None:
        return None
    if c.approx_from <= 0:
        raise HistoryNotFoundError(f"{_label(c.id)} holds a code completion's history whose KV was moved into place "
                                   "from its first token (--cache-reuse: an approximation); nothing saved")
    return c.approx_from


def _saved(info: dict, ctx: int, source: str, reason: str) -> dict:
    return {**info, "slot": "main" if ctx == MAIN else ctx, "source": source, "reason": reason}


def _label(ctx: int) -> str:
    return "context main" if ctx == MAIN else f"slot {ctx}"
