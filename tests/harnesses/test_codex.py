"""The real Codex CLI (the version pinned in codex/package-lock.json) blocked end to end by the
gateway (issue 29): ``codex exec`` runs with a temporary ``CODEX_HOME`` whose ``hooks.json`` holds
the hooks ``ahp-gateway hook config codex`` prints (``--dangerously-bypass-hook-trust`` stands in
for trusting them with ``/hooks``) and whose ``config.toml`` points a model provider at a fake
OpenAI Responses API on loopback (streamed with SSE) that makes the model call ``exec_command``
with the command a test chooses and finish after the tool result. Checks: the hook fired
(``ahp_gateway_native_requests_total``), a denied force push did not run (its marker file is
absent) and the model got the policy's reason, a benign command ran, the PermissionRequest hook
alone denies once Codex asks approvals, and with the gateway down the adapter blocks (the failure
table of docs/agents/codex.md).

Nothing leaves loopback: the features that call github.com or chatgpt.com at start (plugins, apps,
model discovery, tool suggestions) are off, and ``HTTPS_PROXY`` / ``HTTP_PROXY`` point at a
recording proxy that refuses everything; a test fails when anything tried it. Without node and npm
the module is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.server.app import GatewayServer
from tests.harnesses.common import (
    BENIGN,
    FORCE_PUSH,
    POLICY_REASON,
    FakeModel,
    ModelHandler,
    RefusingProxy,
    Run,
    base_env,
    closed_port,
    denies_a_force_push_and_runs_a_benign_command,
    git_project,
    hook_config,
    installed,
    native_requests,
    run_agent,
    serve,
)

HARNESS = "codex"
TOOL = "exec_command"
# Off: every feature that reaches github.com or chatgpt.com at start, and request compression
# (the fake server reads plain JSON).
FEATURES_OFF = (
    "plugins",
    "remote_plugin",
    "apps",
    "plugin_sharing",
    "api_key_model_discovery",
    "tool_suggest",
    "enable_request_compression",
)


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    return installed(HARNESS) / "node_modules" / ".bin" / "codex"


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
    if isinstance(output, dict):
        return str(output.get("content") or output)
    return str(output)


class _CodexModel(FakeModel):
    escalate = False
    """The model asks ``exec_command`` to run unsandboxed (``sandbox_permissions``)."""


class _ResponsesModel(ModelHandler):
    """Just enough of the OpenAI Responses API (streamed): an ``exec_command`` call for a fresh
    prompt, an assistant message after the tool result (and for requests without the tool)."""

    server: _CodexModel

    def do_GET(self) -> None:
        self.send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    def do_POST(self) -> None:
        request = self.body()
        inputs = [i for i in request.get("input") or () if isinstance(i, dict)]
        answered = False
        for entry in inputs:
            if entry.get("type") == "function_call_output":
                self.server.tool_results.append(_output_text(entry.get("output")))
                answered = True
        tools = {t.get("name") for t in request.get("tools") or () if isinstance(t, dict)}
        n = len(self.server.requests)
        if TOOL in tools and not answered:
            call = {"cmd": self.server.command}
            if self.server.escalate:  # asks to run outside the sandbox, so Codex asks approval
                call |= {"sandbox_permissions": "require_escalated", "justification": "Run the command."}
            arguments = json.dumps(call)
            item: dict[str, Any] = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": TOOL}
            item |= {"arguments": arguments, "status": "completed"}
        else:
            content = [{"type": "output_text", "text": "Done.", "annotations": []}]
            item = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed", "content": content}
        response = {"id": f"resp_{n}", "object": "response", "status": "in_progress", "model": "fake-model"}
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        done = {**response, "status": "completed", "output": [item], "usage": usage}
        self.send_sse(
            [
                ("response.created", {"type": "response.created", "response": response}),
                ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
                ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
                ("response.completed", {"type": "response.completed", "response": done}),
            ]
        )


@pytest.fixture(scope="module")
def model() -> Iterator[_CodexModel]:
    yield from serve(_CodexModel(_ResponsesModel))


def _config(model_url: str, approvals: bool) -> str:
    lines = [
        'model = "fake-model"',
        'model_provider = "fake"',
        *(
            ['approval_policy = "on-request"', 'sandbox_mode = "workspace-write"']
            if approvals
            else ['approval_policy = "never"', 'sandbox_mode = "danger-full-access"']
        ),
        "check_for_update_on_startup = false",
        "[analytics]",
        "enabled = false",
        "[model_providers.fake]",
        'name = "fake"',
        f'base_url = "{model_url}/v1"',
        'wire_api = "responses"',
        'env_key = "FAKE_MODEL_API_KEY"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "[features]",
        *(f"{name} = false" for name in FEATURES_OFF),
    ]
    return "\n".join(lines) + "\n"


async def run_codex(
    binary: Path,
    model: _CodexModel,
    proxy: RefusingProxy,
    tmp: Path,
    hooks: dict[str, Any],
    command: str,
    approvals: bool = False,
) -> Run:
    """Without ``approvals`` Codex runs every call at once (``approval_policy = "never"``, no
    sandbox), so its PermissionRequest hook never fires. With them (``on-request`` in the
    ``workspace-write`` sandbox, and ``--approve-for-me``, without which ``codex exec`` keeps
    ``never`` and refuses every escalation by itself) the model asks to run the command outside
    the sandbox and Codex asks approval for it: the PermissionRequest hook answers first, and
    what it leaves undecided goes to Codex's automatic review."""
    home, project, codex_home = tmp / "home", tmp / "project", tmp / "codex-home"
    git_project(project)
    home.mkdir()
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(_config(model.url, approvals))
    (codex_home / "hooks.json").write_text(json.dumps(hooks))
    env = {**base_env(home, proxy), "CODEX_HOME": str(codex_home), "FAKE_MODEL_API_KEY": "fake-key"}
    argv = [str(binary), "exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust", "--json"]
    argv += ["--approve-for-me"] if approvals else []
    argv += ["Run the command."]
    model.escalate = approvals
    try:
        return await run_agent(HARNESS, argv, cwd=project, env=env, model=model, proxy=proxy, command=command)
    finally:
        model.escalate = False


# --------------------------------------------------------------------------------- the tests
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_command_hook_denies_a_force_push_and_runs_a_benign_command(
    codex_bin: Path, model: _CodexModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    hooks = hook_config(HARNESS, gateway.url)

    async def run(project: Path, hooks: dict[str, Any], command: str) -> Run:
        return await run_codex(codex_bin, model, proxy, project, hooks, command)

    await denies_a_force_push_and_runs_a_benign_command(HARNESS, gateway, hooks, run, tmp_path)


async def test_gateway_down_blocks_the_prompt(
    codex_bin: Path, model: _CodexModel, proxy: RefusingProxy, tmp_path: Path
) -> None:
    """The failure table of docs/agents/codex.md: with the gateway stopped the adapter denies UserPromptSubmit by
    itself (--on-error deny): the turn ends without the model being asked."""
    hooks = hook_config(HARNESS, f"http://127.0.0.1:{closed_port()}/")
    model.requests.clear()
    run = await run_codex(codex_bin, model, proxy, tmp_path, hooks, BENIGN)
    assert not run.ran("ran.marker")
    assert not any("/responses" in r for r in model.requests), model.requests
    assert '"type":"turn.completed"' in run.out, (run.out, run.err)


async def test_gateway_down_blocks_the_tool(
    codex_bin: Path, model: _CodexModel, proxy: RefusingProxy, tmp_path: Path
) -> None:
    """PreToolUse alone with the gateway stopped: the adapter denies the call by itself."""
    hooks = hook_config(HARNESS, f"http://127.0.0.1:{closed_port()}/")
    hooks["hooks"] = {"PreToolUse": hooks["hooks"]["PreToolUse"]}
    run = await run_codex(codex_bin, model, proxy, tmp_path, hooks, BENIGN)
    assert not run.ran("ran.marker"), run.tool_results
    assert run.got("policy gateway could not be reached"), (run.tool_results, run.out, run.err)


async def test_an_ask_becomes_the_rules_fallback_deny(
    codex_bin: Path, model: _CodexModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    """Codex rejects ``ask`` on PreToolUse (and would then fail open), so the Codex profile never
    advertises it: the asking rule's fallback deny reaches the model, without --non-interactive."""
    hooks = hook_config(HARNESS, gateway.url)
    command = "touch asked.marker && rm -rf /opt/ahp-harness-does-not-exist"  # the bundled policy asks
    run = await run_codex(codex_bin, model, proxy, tmp_path, hooks, command)
    assert not run.ran("asked.marker"), run.tool_results
    assert run.got("Command blocked by PreToolUse hook: Recursive deletes outside the workspace"), run.tool_results


async def test_the_permission_hook_alone_denies_a_force_push(
    codex_bin: Path, model: _CodexModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    """Approvals on (``--approve-for-me``: ``codex exec`` otherwise forces ``approval_policy``
    to ``never`` and refuses every escalation itself): the model asks to run the force push
    outside the ``workspace-write`` sandbox, Codex's PermissionRequest hook (alone here) reaches
    the gateway, and the gateway's deny, with the policy's reason, is what the model reads.
    Without the hook Codex's automatic review would ask the (fake) model and fail with "review
    failed", never with the policy's reason."""
    hooks = hook_config(HARNESS, gateway.url)
    hooks["hooks"] = {"PermissionRequest": hooks["hooks"]["PermissionRequest"]}
    before = await native_requests(gateway, HARNESS)
    run = await run_codex(codex_bin, model, proxy, tmp_path, hooks, FORCE_PUSH, approvals=True)
    assert not run.ran("pushed.marker"), run.tool_results
    assert await native_requests(gateway, HARNESS) > before
    assert run.got(f'Rejected(\\"{POLICY_REASON}'), (run.tool_results, run.out, run.err)
