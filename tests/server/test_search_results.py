"""Anthropic's `search_result` blocks (cited search results a user or a tool sends), through the real
`anthropic` SDK on the tiny model: read as text (title, source, the result's text), where they were a 400
('not valid in a user message'; in a tool result 'not supported', every turn of the agent's session).
Citations cannot be given; a result without its title is a 400 naming the place."""

from __future__ import annotations

import anthropic
import pytest

RESULT = {"type": "search_result", "source": "https://example.org/caches", "title": "Caches",
          "content": [{"type": "text", "text": "A cache keeps "}, {"type": "text", "text": "what was read."}],
          "citations": {"enabled": True}}
AS_TEXT = "Search result: Caches\nSource: https://example.org/caches\nA cache keeps what was read.\n\n"
TOOLS = [{"name": "search", "description": "Search the docs", "input_schema": {"type": "object"}}]


def counted(claude, content, **kw) -> int:
    return claude.messages.count_tokens(model="m", messages=content, **kw).input_tokens


def test_a_users_search_result_is_read_as_its_text(claude):
    sent = [{"role": "user", "content": [RESULT, {"type": "text", "text": "Sum it up."}]}]
    assert counted(claude, sent) == counted(claude, [{"role": "user", "content": AS_TEXT + "Sum it up."}])
    r = claude.messages.create(model="m", max_tokens=3, messages=sent, extra_body={"temperature": 0})
    assert r.usage.output_tokens >= 1


def test_a_tools_search_results_are_read_as_their_text(claude):
    def turn(result_content):
        return [{"role": "user", "content": "What is a cache?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "search",
                                                   "input": {"q": "cache"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": result_content}]}]

    sent = turn([RESULT, RESULT])
    assert counted(claude, sent, tools=TOOLS) == counted(claude, turn(AS_TEXT * 2), tools=TOOLS)
    r = claude.messages.create(model="m", max_tokens=3, messages=sent, tools=TOOLS, extra_body={"temperature": 0})
    assert r.usage.output_tokens >= 1


def test_a_search_result_without_a_title_is_a_400_naming_it(claude):
    bad = {k: v for k, v in RESULT.items() if k != "title"}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": [bad]}])
    assert e.value.body["error"]["message"] == "messages[0].content[0].title must be a string"


DOCUMENT = {"type": "document", "title": "Notes", "context": "from the wiki",
            "source": {"type": "text", "media_type": "text/plain", "data": "Caches keep reads."}}
DOCUMENT_AS_TEXT = "Document: Notes\nContext: from the wiki\nCaches keep reads.\n\n"


def test_a_text_document_is_read_as_its_text(claude):
    """A document whose source is text (or text blocks) is text: it was a 400 ('document blocks are not
    supported (the model reads text only)'), and a note that it was left out in a tool result."""
    sent = [{"role": "user", "content": [DOCUMENT, {"type": "text", "text": "Sum it up."}]}]
    assert counted(claude, sent) == counted(claude, [{"role": "user", "content": DOCUMENT_AS_TEXT + "Sum it up."}])
    blocks = {**DOCUMENT, "source": {"type": "content", "content": [{"type": "text", "text": "Caches keep reads."}]}}
    assert counted(claude, [{"role": "user", "content": [blocks, {"type": "text", "text": "Sum it up."}]}]) == \
        counted(claude, sent)
    in_result = [{"role": "user", "content": "Read it"},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [DOCUMENT]}]}]
    plain = [*in_result[:2], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                           "content": DOCUMENT_AS_TEXT}]}]
    assert counted(claude, in_result, tools=TOOLS) == counted(claude, plain, tools=TOOLS)


def test_a_pdf_document_is_still_a_400_saying_what_is_read(claude):
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": [pdf]}])
    assert e.value.body["error"]["message"] == ("messages[0].content[0]: document blocks other than text (a PDF, a "
                                                "URL, a file) are not supported (the model reads text only)")


def test_a_result_or_document_after_text_starts_apart(claude):
    """Text before a search result or a document: their title line ran on from it ('Use these.Search result:
    Caches'), in a user turn and in a tool result; it starts a paragraph of its own, as the text after it does."""
    before = {"type": "text", "text": "Use these."}
    for block, as_text in ((RESULT, AS_TEXT), (DOCUMENT, DOCUMENT_AS_TEXT)):
        sent = [{"role": "user", "content": [before, block, {"type": "text", "text": "Sum it up."}]}]
        assert counted(claude, sent) == counted(claude, [{"role": "user", "content": "Use these.\n\n" + as_text
                                                          + "Sum it up."}])
        in_result = [{"role": "user", "content": "Read it"},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "search",
                                                        "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                   "content": [before, block]}]}]
        plain = [*in_result[:2], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                               "content": "Use these.\n\n" + as_text}]}]
        assert counted(claude, in_result, tools=TOOLS) == counted(claude, plain, tools=TOOLS)
