"""JSON Schemas compiled for constrained answers (json_grammar.py): `compile_schema(schema)` turns the subset
below into `Node`s, refusing what it cannot enforce with a `SchemaError` that names the keyword and where
it is.

Enforced: `type` (one or a list), `properties`, `required`, `additionalProperties` (false, true or a
schema; unset: false for an object that lists `properties`, as llama.cpp holds it, else true), `items`, `minItems` / `maxItems`, `minLength` / `maxLength` (in
characters), `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum` (numbers and integers;
draft 4's boolean exclusive forms too; json_numbers.py), `pattern` and `format` (strings; json_patterns.py),
`enum`, `const`, `anyOf` / `oneOf` (oneOf read as anyOf, as OpenAI reads it): branches that begin with
different characters (Pydantic's `Optional[X]`: X or null) are told apart by the first byte, branches that
begin alike (unions of objects told apart by a `"type"` const, `integer | number`, `string | string with a
pattern`) are each followed until the bytes rule them out (json_union.py; a recursive union whose alike
branches would hold two different schemas at one place that each hold it again, level after level, is
refused: what it keeps would double with each level),
`$ref` to `#/$defs/...` or `#/definitions/...`. Ignored: annotations (`title`, `description`, `default`,
`examples`, `$schema`, `$id`, `strict`, `discriminator`). Anything else (`multipleOf`, `allOf`,
`not`, ...) is refused by name rather than silently not enforced, except in a tool's parameters
(`lenient`): there a keyword that only validates (`format` and `pattern` too: the tool checks its own
arguments) is passed over and a part that cannot be enforced takes any value, so the rest of the tool's
arguments are still held.

Not here: following an answer byte by byte (json_grammar.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from strata.engine.json_numbers import MAX_NUMBER, Bounds, writable
from strata.engine.json_patterns import Pattern, PatternError, compile_pattern, format_pattern
from strata.engine.json_union import holds_itself, unbounded_at

# `discriminator` (OpenAPI's, Pydantic's discriminated unions) only names the key that tells the branches apart:
# the branches' own `const` hold it
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment", "strict",
                         "$defs", "definitions", "readOnly", "writeOnly", "deprecated", "discriminator"})


# keywords that validate a value without shaping it: a tool's parameters (lenient) pass over them
VALIDATION_ONLY = frozenset({"pattern", "format", "multipleOf", "uniqueItems", "minProperties", "maxProperties",
                             "propertyNames", "patternProperties", "contentEncoding", "contentMediaType",
                             "dependentRequired", "dependencies", "not", "if", "then", "else", "contains",
                             "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems"})
BOUND_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


class SchemaError(ValueError):
    """A schema this module cannot enforce; the message names the keyword and its place."""


@dataclass(eq=False)
class Node:
    """One compiled schema: kind is any / object / array / string / number / integer / literal / union."""

    kind: str
    props: dict[str, Node] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    extra: Node | None = None             # additional properties' schema; None: none allowed
    items: Node | None = None
    min_n: int = 0                        # items or characters
    max_n: int | None = None
    literals: tuple[bytes, ...] = ()      # literal: the compact JSON of each allowed value
    alternatives: tuple[Node, ...] = ()   # union
    # an object whose "name" (written first) picks its "arguments" schema: literal bytes -> schema (a call)
    by_name: dict[bytes, Node] = field(default_factory=dict)
    pending_first: frozenset[int] = frozenset()   # "pending": a $ref being compiled (its first bytes)
    bounds: Bounds | None = None          # number / integer: minimum, maximum (exclusive or not)
    pattern: Pattern | None = None        # string: `pattern` or `format` (json_patterns.py)

    def first_bytes(self) -> frozenset[int]:
        k = self.kind
        if k == "pending":
            return self.pending_first
        if k == "object":
            return frozenset(b"{")
        if k == "array":
            return frozenset(b"[")
        if k == "string":
            return frozenset(b'"')
        if k in ("number", "integer"):
            return frozenset(b"-0123456789")
        if k == "literal":
            return frozenset(v[0] for v in self.literals)
        if k == "union":
            return frozenset().union(*(a.first_bytes() for a in self.alternatives))
        return frozenset(b'{["-0123456789tfn')   # any


ANY = Node("any")
# what an unconstrained value turns into at its first byte
ANY_OBJECT = Node("object", extra=ANY)
ANY_ARRAY = Node("array", items=ANY)
ANY_STRING = Node("string")
ANY_NUMBER = Node("number")
ANY_WORD = Node("literal", literals=(b"true", b"false", b"null"))


def _literal(values: Iterable[Any], where: str) -> Node:
    out = []
    for v in values:
        try:
            out.append(json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode())
        except (TypeError, ValueError) as e:
            raise SchemaError(f"{where}: {v!r} is not a JSON value ({e})") from None
    if not out:
        raise SchemaError(f"{where}: an empty enum allows nothing")
    return Node("literal", literals=tuple(dict.fromkeys(out)))


def _count(schema: dict, key: str, where: str) -> int | None:
    v = schema.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SchemaError(f"{where}.{key} must be a non-negative integer, got {v!r}")
    return v


def _bound(schema: dict, key: str, where: str) -> Fraction | None:
    v = schema.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SchemaError(f"{where}.{key} must be a finite number, got {v!r}")
    return Fraction(v)


def _bounds(schema: dict, kind: str, where: str) -> Bounds | None:
    """minimum / maximum / exclusiveMinimum / exclusiveMaximum (a number, or draft 4's boolean that makes
    minimum / maximum exclusive); SchemaError when they leave no value of `kind`."""
    if not any(k in schema for k in BOUND_KEYS):
        return None
    ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    lo, hi = _bound(schema, "minimum", where), _bound(schema, "maximum", where)
    lo_open = hi_open = False
    if isinstance(ex_lo, bool):
        lo_open = ex_lo and lo is not None
    elif ex_lo is not None:
        x = _bound(schema, "exclusiveMinimum", where)
        if lo is None or x >= lo:
            lo, lo_open = x, True
    if isinstance(ex_hi, bool):
        hi_open = ex_hi and hi is not None
    elif ex_hi is not None:
        x = _bound(schema, "exclusiveMaximum", where)
        if hi is None or x <= hi:
            hi, hi_open = x, True
    b = Bounds(lo, lo_open, hi, hi_open)
    if kind == "integer":               # the integer ends, so that an empty integer range is seen here
        ilo = None if lo is None else math.floor(lo) + 1 if lo_open or lo != math.floor(lo) else int(lo)
        ihi = None if hi is None else math.ceil(hi) - 1 if hi_open or hi != math.ceil(hi) else int(hi)
        empty = ilo is not None and ihi is not None and ilo > ihi
    else:
        empty = lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_open or hi_open)))
    if empty or not writable(b, kind == "integer", MAX_NUMBER):
        raise SchemaError(f"{where}: minimum / maximum allow no {kind}"
                          + ("" if empty else f" of at most {MAX_NUMBER} characters"))
    return b


class _Compiler:
    def __init__(self, root: Any, closed: bool = False, lenient: bool = False):
        self.root = root
        self.closed = closed
        self.lenient = lenient            # a tool's parameters: what cannot be enforced takes any value
        self.refs: dict[str, Node] = {}
        self.unions: list[tuple[Node, str]] = []  # every union, and where it is (checked once all is compiled)

    def ref(self, ref: Any, where: str) -> Node:
        if not isinstance(ref, str) or not ref.startswith(("#/$defs/", "#/definitions/")):
            raise SchemaError(f"{where}.$ref must point into #/$defs or #/definitions, got {ref!r}")
        if ref in self.refs:
            return self.refs[ref]
        section, name = ref[2:].split("/", 1)
        target = self.root.get(section, {}).get(name) if isinstance(self.root.get(section), dict) else None
        if target is None:
            raise SchemaError(f"{where}.$ref {ref!r} names no definition")
        # filled in below; a recursive schema reaches this same node meanwhile
        node = Node("pending", pending_first=self.declared_first_bytes(target, 0))
        self.refs[ref] = node
        done = self.node(target, ref)
        node.__dict__.update(done.__dict__)
        if node.kind == "pending":
            raise SchemaError(f"{where}.$ref {ref!r} names only itself")
        self.unions = [(node if n is done else n, w) for n, w in self.unions]   # the node the schema reaches
        return node

    def declared_first_bytes(self, schema: Any, depth: int) -> frozenset[int]:
        """The first bytes a raw schema's values may take (for a union holding a $ref still compiling)."""
        every = ANY.first_bytes()
        if not isinstance(schema, dict) or depth > 32:
            return every
        if isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
            section, _, name = schema["$ref"][2:].partition("/")
            defs = self.root.get(section) if isinstance(self.root, dict) else None
            return self.declared_first_bytes(defs.get(name) if isinstance(defs, dict) else None, depth + 1)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                return frozenset().union(*(self.declared_first_bytes(b, depth + 1) for b in schema[key]))
        types = schema.get("type")
        names = [types] if isinstance(types, str) else types if isinstance(types, list) else None
        if names is None:
            return every
        starts = {"object": b"{", "array": b"[", "string": b'"', "number": b"-0123456789",
                  "integer": b"-0123456789", "boolean": b"tf", "null": b"n"}
        return frozenset(b for t in names for b in starts.get(t, b""))

    def node(self, schema: Any, where: str) -> Node:
        if not self.lenient:
            return self.strict_node(schema, where)
        try:
            return self.strict_node(schema, where)
        except SchemaError:
            return ANY                     # this part takes any value; its neighbours are still held

    def strict_node(self, schema: Any, where: str) -> Node:
        if schema is True or schema == {}:
            return ANY
        if not isinstance(schema, dict):
            raise SchemaError(f"{where} must be a schema object, got {schema!r}")
        if "$ref" in schema:
            return self.ref(schema["$ref"], where)
        known = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                 "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "pattern", "format", *BOUND_KEYS}
        for key in schema:
            if key not in known and key not in ANNOTATIONS and not (self.lenient and key in VALIDATION_ONLY):
                raise SchemaError(f"{where}.{key} is not supported in a response_format schema (supported: "
                                  f"{', '.join(sorted(known))})")
        if any(k in schema for k in BOUND_KEYS) and not ({"type", "enum", "const", "anyOf", "oneOf"} & schema.keys()):
            raise SchemaError(f"{where}: minimum / maximum need \"type\": \"number\" or \"integer\"")
        if "const" in schema:
            return _literal([schema["const"]], f"{where}.const")
        if "enum" in schema:
            if not isinstance(schema["enum"], list):
                raise SchemaError(f"{where}.enum must be an array")
            return _literal(schema["enum"], f"{where}.enum")
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = schema[key]
                if not isinstance(branches, list) or not branches:
                    raise SchemaError(f"{where}.{key} must be a non-empty array")
                return self.union([self.node(b, f"{where}.{key}[{i}]") for i, b in enumerate(branches)],
                                  f"{where}.{key}")
        types = schema.get("type")
        if types is None:
            return ANY if not ({"properties", "items"} & schema.keys()) else \
                self.typed(schema, "object" if "properties" in schema else "array", where)
        if isinstance(types, str):
            return self.typed(schema, types, where)
        if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
            return self.union([self.typed(schema, t, where) for t in types], f"{where}.type")
        raise SchemaError(f"{where}.type must be a type name or a list of them, got {types!r}")

    def typed(self, schema: dict, kind: str, where: str) -> Node:
        if kind == "object":
            props_raw = schema.get("properties", {})
            if not isinstance(props_raw, dict):
                raise SchemaError(f"{where}.properties must be an object")
            props = {str(k): self.node(v, f"{where}.properties.{k}") for k, v in props_raw.items()}
            req = schema.get("required", [])
            if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
                raise SchemaError(f"{where}.required must be an array of property names")
            missing = [r for r in req if r not in props]
            if missing and schema.get("additionalProperties") is False:
                raise SchemaError(f"{where}.required names {missing[0]!r}, which is not in properties")
            extra_raw = schema.get("additionalProperties", not (self.closed and "properties" in schema))
            if missing and extra_raw is False:
                # closed by default (llama.cpp's reading), not by the schema: a required key the properties do not
                # list takes any value, as JSON Schema has it. Left out, no answer could be whole: the answer
                # found no token to go on with at its end (a 500 that failed the scheduler's step)
                props.update({r: self.node(True, f"{where}.required") for r in missing})
            extra = None if extra_raw is False else self.node(extra_raw, f"{where}.additionalProperties")
            return Node("object", props=props, required=frozenset(req), extra=extra)
        if kind == "array":
            items = self.node(schema.get("items", True), f"{where}.items")
            lo, hi = _count(schema, "minItems", where) or 0, _count(schema, "maxItems", where)
            _check_counts(lo, hi, "minItems / maxItems", "array", where)
            return Node("array", items=items, min_n=lo, max_n=hi)
        if kind == "string":
            lo, hi = _count(schema, "minLength", where) or 0, _count(schema, "maxLength", where)
            _check_counts(lo, hi, "minLength / maxLength", "string", where)
            return Node("string", min_n=lo, max_n=hi, pattern=self.string_pattern(schema, lo or hi is not None, where))
        if kind in ("number", "integer"):
            return Node(kind, bounds=_bounds(schema, kind, where))
        if kind == "boolean":
            return _literal([True, False], where)
        if kind == "null":
            return _literal([None], where)
        raise SchemaError(f"{where}.type {kind!r} is not a JSON Schema type")

    def string_pattern(self, schema: dict, has_length: bool, where: str) -> Pattern | None:
        """The automaton of a string's `pattern` or `format`; None without one (or, lenient, when it only
        validates: a tool checks its own arguments)."""
        keys = [k for k in ("pattern", "format") if k in schema]
        if not keys or self.lenient:
            return None
        if len(keys) > 1 or has_length:
            raise SchemaError(f"{where}: {' and '.join(keys)} together with "
                              f"{'format' if len(keys) > 1 else 'minLength / maxLength'} is not supported; "
                              "write it all into one pattern")
        try:
            return compile_pattern(schema["pattern"]) if keys[0] == "pattern" else format_pattern(schema["format"])
        except PatternError as e:
            raise SchemaError(f"{where}.{keys[0]}: {e}") from None

    def union(self, nodes: list[Node], where: str) -> Node:
        flat: list[Node] = []
        for n in nodes:
            flat.extend(n.alternatives if n.kind == "union" else [n])
        if any(n.kind == "any" for n in flat):
            return ANY
        # literals may share first bytes among themselves: merge them into one
        lits = [n for n in flat if n.kind == "literal"]
        rest = [n for n in flat if n.kind != "literal"]
        if len(lits) > 1:
            rest.append(Node("literal", literals=tuple(dict.fromkeys(v for n in lits for v in n.literals))))
        elif lits:
            rest.append(lits[0])
        if len(rest) == 1:
            return rest[0]
        node = Node("union", alternatives=tuple(rest))
        self.unions.append((node, where))
        return node

    def check_unions(self) -> None:
        """Refuses (lenient: lets any value through) a union that is one of its own branches, and one whose
        branches that begin alike (json_union.py's frame) would keep what has no bound."""
        for node, where in self.unions:
            if holds_itself(node):
                if not self.lenient:
                    raise SchemaError(f"{where}: a branch of this union is the union itself (through $ref)")
                node.__dict__.update(ANY.__dict__)
        for node, where in self.unions:
            b = unbounded_at(node) if node.kind == "union" else None
            if b is None:
                continue
            if self.lenient:
                node.__dict__.update(ANY.__dict__)
                continue
            raise SchemaError(f"{where}: two branches that begin with {chr(b)!r} hold, at one place, two different "
                              "schemas that can each hold this union again (through $ref), level after level, so what "
                              "is kept while the answer is written would double with each level; not supported")


def _check_counts(lo: int, hi: int | None, keys: str, kind: str, where: str) -> None:
    """SchemaError when a least count is above a most one: no value fits, and the constrained answer would find
    no token to go on with mid-value (a 500 that failed the scheduler's step, every row in it)."""
    if hi is not None and lo > hi:
        raise SchemaError(f"{where}: {keys} allow no {kind} ({lo} > {hi})")


def compile_schema(schema: Any, closed: bool = True, lenient: bool = False) -> Node:
    """The root node of a JSON Schema; SchemaError names what cannot be enforced. `closed` (the default, as
    llama.cpp holds schemas): an object with `properties` that says nothing of others takes only those
    (what a model should write, where JSON Schema's default would let it invent keys: `llm --schema` sends
    such schemas, and SmolLM2 wrote keys of its own until max_tokens; `"properties": {}` takes none).
    `closed=False` is JSON Schema's reading, others allowed.
    `lenient`: validation-only keywords passed over, a part that cannot be enforced any value."""
    compiler = _Compiler(schema, closed, lenient)
    root = compiler.node(schema, "schema")
    compiler.check_unions()
    return root


def tool_arguments(params: Any) -> Node:
    """A tool's arguments as its parameters schema allows them, compiled leniently and closed: an object
    always (any object when the schema is none that this can hold as one)."""
    try:
        args = compile_schema(params if params is not None else {"type": "object"}, closed=True, lenient=True)
    except (SchemaError, RecursionError):
        return ANY_OBJECT
    return args if args.kind == "object" else ANY_OBJECT


def compile_call(tools: list[tuple[str, Any]], with_id: bool = False) -> Node:
    """A tool call's JSON, {"name": ..., "arguments": ...}, "name" first: one of the tools' names, then the
    arguments that tool's parameters allow (objects that list properties take only those; keywords that
    only validate passed over; a part this cannot enforce any value, its neighbours still held; the
    parameters any object when they are no object schema at all). `tools`: (name, parameters schema) pairs.
    `with_id`: an "id" string may come too (Mistral Nemo's calls carry their own)."""
    by_name = {json.dumps(name, ensure_ascii=False).encode(): tool_arguments(params) for name, params in tools}
    names = _literal([n for n, _ in tools], "tools")
    props = {"name": names, "arguments": compile_schema({"type": "object"})}
    if with_id:
        props["id"] = ANY_STRING
    return Node("object", props=props, required=frozenset({"name", "arguments"}), by_name=by_name)
