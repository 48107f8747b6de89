"""Claude Code's parallel subagents (the Task tool) begin with the main conversation's system prompt and
tools and differ only in their own task. Sent together, the second waits while the first reads the
shared start, then copies it and reads only its own task (docs/slot-policy.md): it must not be let go
while the read is still short of the shared start, to read the rest of it a second time beside the first.

A multi-agent trial (SmolLM2-135M, --batch 3, one thread, the real `anthropic` SDK): a subagent copied
3,155 of the 3,650 tokens it shared with another that was reading them, and read 708 tokens where its
own were 221: it was let go once the read was within SHARED_READ_WAIT_MIN (512) of the shared end."""

from __future__ import annotations

import anthropic
import pytest

from tests.server.live import LiveServer, run_together

# about 1,500 tokens of system prompt on the tiny model's byte-level vocabulary
SYSTEM = "You are a coding agent. " + " ".join(f"Rule {i}: read before you edit." for i in range(50))
TOOLS = [{"name": "Bash", "description": "Run a shell command.",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


@pytest.fixture(scope="module")
def server(tiny_model_factory):
    # a bigger random model (about 1.5 ms a token on one thread), so that a read is still under way
    model = tiny_model_factory(ctx_len=4096, seed=5, n_layer=6, n_embd=256, n_ff=768, n_head=4, n_head_kv=2,
                               dtype="Q8_0")
    with LiveServer(model=str(model), ctx=4096, batch=3, slot_ctx=4096, threads=1, conversation_cache_mib=0) as s:
        yield s


def subagent(claude: anthropic.Anthropic, task: str) -> int:
    """One subagent's first request, streamed as Claude Code sends it; its X-Strata-Request number."""
    with claude.messages.stream(model="local", max_tokens=2, system=SYSTEM, tools=TOOLS, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": task}]) as stream:
        stream.get_final_message()
        return int(stream.response.headers["x-strata-request"])


def test_a_subagent_started_beside_another_copies_the_whole_shared_start(server):
    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
    first_id, second_id = run_together(server, [
        lambda: subagent(claude, "Task 1: find where the slot policy evicts a history."),
        lambda: subagent(claude, "Task 2: find where the cache restores a history.")])
    records = {r["id"]: r for r in claude.get("/v1/monitor", cast_to=object)["requests"]}
    first, second = records[first_id], records[second_id]
    assert first["reused_tokens"] == 0 and first["prompt_tokens"] > 1100
    # the tasks differ after "Task "; the shared start is all but the task's own tokens (about 50)
    own = second["prompt_tokens"] - second["reused_tokens"]
    assert second["source"] == "slot" and own < 80, (second, first["prompt_tokens"])
