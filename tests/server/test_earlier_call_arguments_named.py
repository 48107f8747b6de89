"""The 400 for an earlier call whose arguments are not a JSON object names the field the request holds
(847c734 names the converted chat messages' index, which is the request's only for Chat Completions
without reordering)."""

from __future__ import annotations

import pytest
from strata.engine.chat_template import ChatTemplate, ChatTemplateError
from strata.server.responses_api import parse_input

from tests.text.test_xml_tool_template import TOOLS, XML_TEMPLATE


@pytest.mark.xfail(strict=True, reason="chat_template._arguments_not_an_object names messages[i] of the converted "
                   "list: Responses' instructions and merged function_call items shift it (engine_native: lead)")
def test_a_responses_cut_call_is_named_by_its_input_item():
    body = {"instructions": "Be brief.", "input": [
        {"role": "user", "content": "fix it"},
        {"type": "function_call", "call_id": "c1", "name": "edit_file", "arguments": '{"path": "x"'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}
    with pytest.raises(ChatTemplateError) as e:
        ChatTemplate(XML_TEMPLATE).render(parse_input(body), tools=TOOLS)
    assert "input[1].arguments must be a JSON object" in str(e.value), str(e.value)
