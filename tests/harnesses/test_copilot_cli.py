"""The real Copilot CLI (the version pinned in copilot/package-lock.json) blocked end to end by the
gateway (issue 29): ``copilot -p`` runs in a temporary HOME and project with the hook settings
that ``ahp-gateway hook config copilot`` prints, against a fake OpenAI chat-completions server on
loopback that makes the model call ``bash`` with the command a test chooses and finish after the
tool result. Checks: the hook fired (``ahp_gateway_native_requests_total``), a denied command did
not run (its marker file is absent) and the model got the policy's reason, a benign command ran,
the permission hook alone denies (Copilot sends ``toolInput`` there), and with the gateway down
the adapter and the HTTP hook block.

Nothing leaves loopback: ``COPILOT_OFFLINE``, no auto-update, no telemetry, and ``HTTPS_PROXY`` /
``HTTP_PROXY`` point at a recording proxy that refuses everything; a test fails when anything
tried it. The package is installed once into ``.cache/harnesses/copilot`` (gitignored) with
``npm ci`` (tests/harnesses/install.py); without node and npm the module is skipped.
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
    hook_config,
    installed,
    native_requests,
    run_agent,
    serve,
)

HARNESS = "copilot"


@pytest.fixture(scope="session")
def copilot_bin() -> Path:
    return installed(HARNESS) / "node_modules" / ".bin" / "copilot"


class _CopilotModel(ModelHandler):
    """Just enough of OpenAI chat completions (streamed or not) for one tool call per prompt."""

    def do_GET(self) -> None:
        self.send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    def do_POST(self) -> None:
        request = self.body()
        messages = request.get("messages") or [{}]
        tools = {t.get("function", {}).get("name") for t in request.get("tools") or ()}
        for message in messages:
            if message.get("role") == "tool":
                self.server.tool_results.append(str(message.get("content")))
        if messages[-1].get("role") == "tool" or "bash" not in tools:
            delta: dict[str, Any] = {"role": "assistant", "content": "Done."}
            finish = "stop"
        else:
            arguments = json.dumps({"command": self.server.command, "description": "run the command"})
            call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": arguments}}
            delta, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not request.get("stream"):
            choice = {"index": 0, "message": delta, "finish_reason": finish}
            body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "fake-model", "choices": [choice]}
            self.send(200, {**body, "usage": usage})
            return
        if "tool_calls" in delta:
            delta["tool_calls"] = [{**delta["tool_calls"][0], "index": 0}]
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
        events: list[tuple[str | None, Any]] = [
            (None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}),
        ]
        self.send_sse(events, tail=b"data: [DONE]\n\n")


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModel]:
    yield from serve(FakeModel(_CopilotModel))


async def run_copilot(
    binary: Path, model: FakeModel, proxy: RefusingProxy, tmp: Path, hooks: dict[str, Any], command: str
) -> Run:
    home, project = tmp / "home", tmp / "project"
    (project / ".github" / "hooks").mkdir(parents=True)
    home.mkdir()
    (project / ".github" / "hooks" / "ahp-gateway.json").write_text(json.dumps(hooks))
    env = {
        **base_env(home, proxy),
        "XDG_CACHE_HOME": str(binary.parents[2] / "xdg-cache"),  # the CLI unpacks itself there once
        "COPILOT_OFFLINE": "true",
        "COPILOT_PROVIDER_BASE_URL": model.url,
        "COPILOT_PROVIDER_API_KEY": "fake-key",
        "COPILOT_MODEL": "fake-model",
        "COPILOT_ALLOW_ALL": "true",  # loads .github/hooks/ without a trust prompt
        "COPILOT_HOOK_ALLOW_LOCALHOST": "1",  # plain http to the loopback gateway
    }
    argv = [str(binary), "-p", "Run the command.", "--allow-all-tools", "--allow-all-paths"]
    argv += ["--no-auto-update", "--disable-client-telemetry"]
    return await run_agent(HARNESS, argv, cwd=project, env=env, model=model, proxy=proxy, command=command)


# --------------------------------------------------------------------------------- the tests
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_command_hook_denies_a_force_push_and_runs_a_benign_command(
    copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    hooks = hook_config(HARNESS, gateway.url)

    async def run(project: Path, hooks: dict[str, Any], command: str) -> Run:
        return await run_copilot(copilot_bin, model, proxy, project, hooks, command)

    await denies_a_force_push_and_runs_a_benign_command(HARNESS, gateway, hooks, run, tmp_path)


async def test_the_permission_hook_alone_denies_on_copilots_tool_input(
    copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    """issue 29: Copilot's permissionRequest payload carries ``toolInput``; read as ``{}`` it let
    the force push run."""
    hooks = hook_config(HARNESS, gateway.url)
    hooks["hooks"] = {"permissionRequest": hooks["hooks"]["permissionRequest"]}
    run = await run_copilot(copilot_bin, model, proxy, tmp_path, hooks, FORCE_PUSH)
    assert not run.ran("pushed.marker")
    assert any(POLICY_REASON in r for r in run.tool_results), run.tool_results


async def test_http_hook_denies_through_the_native_endpoint(
    copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    hooks = hook_config(HARNESS, gateway.url, "--http")
    run = await run_copilot(copilot_bin, model, proxy, tmp_path, hooks, FORCE_PUSH)
    assert not run.ran("pushed.marker")
    assert any(POLICY_REASON in r for r in run.tool_results), run.tool_results


@pytest.mark.parametrize("kind", ["command", "http"])
async def test_gateway_down_blocks(
    kind: str, copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, tmp_path: Path
) -> None:
    """The failure table of docs/agents/copilot.md: with the gateway stopped the command adapter denies by itself
    (--on-error deny), and Copilot 1.0.102 denies when its HTTP hook's connection is refused."""
    down = f"http://127.0.0.1:{closed_port()}/"
    hooks = hook_config(HARNESS, down, *(["--http"] if kind == "http" else []))
    run = await run_copilot(copilot_bin, model, proxy, tmp_path, hooks, BENIGN)
    assert not run.ran("ran.marker"), run.tool_results
    expected = "policy gateway could not be reached" if kind == "command" else "hook errored"
    assert any(expected in r for r in run.tool_results), run.tool_results


@pytest.mark.parametrize("non_interactive", [False, True])
async def test_ask_in_a_headless_run(
    non_interactive: bool,
    copilot_bin: Path,
    model: FakeModel,
    proxy: RefusingProxy,
    gateway: GatewayServer,
    tmp_path: Path,
) -> None:
    """issue 29: a rule's ask reaches ``copilot -p`` with the asking rule's own reason (its
    description, sent by the bundled policy as a ``message`` beside the ``ask``, which has no
    text; before, "No reason provided" and then a generic reason); Copilot denies it, nobody
    being there to confirm, and the model reads that reason (Copilot 1.0.102 elides the middle
    of a long one). With ``--non-interactive`` the model gets the asking rule's fallback deny."""
    hooks = hook_config(HARNESS, gateway.url, *(["--non-interactive"] if non_interactive else []))
    command = "touch asked.marker && rm -rf /opt/ahp-harness-does-not-exist"  # the bundled policy asks
    run = await run_copilot(copilot_bin, model, proxy, tmp_path, hooks, command)
    assert not run.ran("asked.marker"), run.tool_results
    if non_interactive:
        expected = "Denied by preToolUse hook: Recursive deletes outside the workspace"
    else:
        expected = "(unable to ask user for confirmation): Recursive deletes outside the workspace"
    assert any(expected in r for r in run.tool_results), run.tool_results


async def test_a_message_without_a_decision_is_not_shown_by_copilot(
    copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    """What docs/agents/copilot.md says of preToolUse: a ``message`` with no ask or deny has no
    Copilot field; the adapter writes it to the hook's stderr, and Copilot 1.0.102 shows it
    neither to the model nor in its output. (The bundled policy's force-with-lease tip on a
    force push to a feature branch.)"""
    hooks = hook_config(HARNESS, gateway.url)
    before = await native_requests(gateway, HARNESS, event_type="tool.before", outcome="message")
    run = await run_copilot(
        copilot_bin, model, proxy, tmp_path, hooks, "touch tip.marker && git push -f origin feature-x"
    )
    assert await native_requests(gateway, HARNESS, event_type="tool.before", outcome="message") == before + 1
    assert run.ran("tip.marker")  # nothing blocked
    assert not any("force-with-lease" in text for text in [*run.tool_results, run.out, run.err])
