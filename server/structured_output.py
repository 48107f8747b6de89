"""`response_format` (chat completions) and `text.format` (responses): JSON answers enforced while they are
generated (strata.engine.json_grammar, json_schema).

What it is: `json_format(value, where)` reads the field into a `JsonFormat` (the compiled schema) or None
for plain text, with a 400 naming the field on a bad value or a schema keyword that cannot be enforced;
`json_format.constraint_for(...)` is how the scheduler builds one answer's constraint. Which answers are
constrained (`constrained_format`): every one without tools; with tools offered the model must stay free
to call them, so nothing is enforced (docs/api.md says so). A reasoning model's answer is free until its
reasoning closes (the `</think>` tag, Harmony's final channel), then JSON.

Not here: the automaton (json_grammar.py), the schema subset (json_schema.py), the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strata.engine.json_grammar import JsonConstraint, Vocabulary
from strata.engine.json_schema import ANY_OBJECT, Node, SchemaError, compile_schema
from strata.server.errors import APIError

HARMONY_FINAL = b"<|channel|>final<|message|>"


@dataclass(frozen=True, eq=False)
class JsonFormat:
    root: Node
    after: bytes | None = None      # bytes the answer writes freely first (the end of its reasoning)
    prefix: bytes = b""             # the answer's start the request wrote itself (Anthropic's prefill)

    def constraint_for(self, tokenizer: Any, eos_ids: Any) -> JsonConstraint:
        c = JsonConstraint(self.root, Vocabulary.of(tokenizer), eos_ids, after=self.after)
        c.feed(self.prefix)
        return c

    def with_prefix(self, text: str, where: str) -> JsonFormat:
        """This format for an answer that continues `text`; a 400 when no JSON value starts with it."""
        if not text:
            return self
        prefix = text.encode()
        try:
            JsonConstraint(self.root, Vocabulary([]), (), after=self.after).feed(prefix)
        except ValueError:
            raise APIError(400, f"the assistant's prefill {text[:40]!r} does not begin a JSON value that "
                           f"'{where}' allows", param=where) from None
        return JsonFormat(self.root, self.after, prefix)


def _schema_format(spec: Any, where: str) -> JsonFormat:
    if not isinstance(spec, dict):
        raise APIError(400, f"'{where}' must be an object with a 'schema'", param=where)
    schema = spec.get("schema")
    if schema is None:
        raise APIError(400, f"'{where}.schema' is required for type 'json_schema'", param=where)
    try:
        return JsonFormat(compile_schema(schema))
    except SchemaError as e:
        raise APIError(400, f"'{where}': {e}", param=where) from None
    except RecursionError:
        raise APIError(400, f"'{where}.schema' is nested too deeply", param=where) from None


def json_format(value: Any, where: str = "response_format", flat: bool = False) -> JsonFormat | None:
    """The chat completions `response_format` (or, flat, a format whose json_schema fields sit beside its
    type: the Responses API's `text.format`, Anthropic's `output_config.format`): None for text."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise APIError(400, f"'{where}' must be an object like {{\"type\": \"json_object\"}}", param=where)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonFormat(ANY_OBJECT)
    if kind == "json_schema":
        spec = value if flat else value.get("json_schema")
        return _schema_format(spec, where if flat else f"{where}.json_schema")
    raise APIError(400, f"'{where}.type' must be 'text', 'json_object' or 'json_schema', got {kind!r}", param=where)


def constrained_format(fmt: JsonFormat | None, tools: Any, answer: Any) -> JsonFormat | None:
    """What the answer is held to: nothing with tools offered; after its reasoning for a thinking model
    (`answer`: prompting.AnswerFormat)."""
    if fmt is None or tools:
        return None
    if getattr(answer, "harmony", False):
        return JsonFormat(fmt.root, after=HARMONY_FINAL)
    if getattr(answer, "opened", False):
        return JsonFormat(fmt.root, after=answer.think[1].encode())
    return fmt
