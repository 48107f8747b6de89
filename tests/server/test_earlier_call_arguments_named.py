"""The 400 for an earlier call whose arguments are not a JSON object names the call by its function and id
(847c734 named the converted chat messages' index, messages[2] here, which the request does not have:
Responses' instructions and merged items shift it)."""

from __future__ import annotations

import pytest
from strata.engine.chat_template import ChatTemplate, ChatTemplateError
from strata.server.responses_api import parse_input

from tests.text.test_xml_tool_template import TOOLS, XML_TEMPLATE


def test_a_responses_cut_call_is_named_by_its_function_and_id():
    body = {"instructions": "Be brief.", "input": [
        {"role": "user", "content": "fix it"},
        {"type": "function_call", "call_id": "c1", "name": "edit_file", "arguments": '{"path": "x"'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}
    with pytest.raises(ChatTemplateError) as e:
        ChatTemplate(XML_TEMPLATE).render(parse_input(body), tools=TOOLS)
    assert "the earlier call of 'edit_file' (id 'c1'): its arguments must be a JSON object" in str(e.value)
    assert "messages[" not in str(e.value)
