"""The real Claude Code (the version pinned in claude-code/package-lock.json) blocked end to end
by the gateway (issue 29): ``claude -p`` runs in a temporary HOME and project whose
``.claude/settings.json`` holds the hooks ``ahp-gateway hook config claude-code`` prints, against
a fake Anthropic Messages API on loopback (streamed with SSE) that makes the model call ``Bash``
with the command a test chooses and finish after the tool result. Checks: the hook fired
(``ahp_gateway_native_requests_total``), a denied force push did not run (its marker file is
absent) and the model got the policy's reason, a benign command ran, the HTTP hook denies too, and
with the gateway down both kinds of hook block (the failure table of docs/agents/claude-code.md).

The npm package's ``claude`` is a stub that its postinstall replaces; with ``npm ci
--ignore-scripts`` the tests run the platform package's native binary directly (it needs no node
22). Nothing leaves loopback: no auto-update, no nonessential traffic, and ``HTTPS_PROXY`` /
``HTTP_PROXY`` point at a recording proxy that refuses everything; a test fails when anything
tried it. Without node and npm the module is skipped.
"""

from __future__ import annotations

import json
import platform
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
    run_agent,
    serve,
)

HARNESS = "claude-code"


def native_packages(system: str, machine: str) -> list[str]:
    """The pinned package's optional platform packages that can hold this machine's ``claude``
    (npm installs the one whose ``os``/``cpu``/``libc`` match: ``-musl`` on Alpine and other musl
    systems), in the order the package's own installer prefers them."""
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine.lower())
    os_name = {"Linux": "linux", "Darwin": "darwin"}.get(system)
    if arch is None or os_name is None:
        return []
    base = f"claude-code-{os_name}-{arch}"
    return [base, f"{base}-musl"] if os_name == "linux" else [base]


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    scope = installed(HARNESS) / "node_modules" / "@anthropic-ai"
    names = native_packages(platform.system(), platform.machine())
    for name in names:
        if (scope / name / "claude").is_file():
            return scope / name / "claude"
    looked = ", ".join(f"@anthropic-ai/{n}" for n in names) or "none exists for it"
    pytest.skip(f"no native Claude Code binary for {platform.system()} {platform.machine()} (looked for: {looked})")


async def test_native_packages_cover_glibc_and_musl() -> None:
    """The fixture finds the binary wherever npm put it: glibc and musl Linux, macOS, both CPUs;
    every name it looks for is an optional dependency of the pinned package."""
    lock = json.loads((Path(__file__).parent / HARNESS / "package-lock.json").read_text())
    optional = {k.rsplit("/", 1)[1] for k, v in lock["packages"].items() if v.get("optional")}
    assert native_packages("Linux", "x86_64") == ["claude-code-linux-x64", "claude-code-linux-x64-musl"]
    assert native_packages("Linux", "aarch64") == ["claude-code-linux-arm64", "claude-code-linux-arm64-musl"]
    assert native_packages("Darwin", "arm64") == ["claude-code-darwin-arm64"]
    assert native_packages("Windows", "AMD64") == []
    for system, machine in [("Linux", "x86_64"), ("Linux", "aarch64"), ("Darwin", "arm64"), ("Darwin", "x86_64")]:
        assert set(native_packages(system, machine)) <= optional


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(block.get("text", "")) for block in content or () if isinstance(block, dict))


class _AnthropicModel(ModelHandler):
    """Just enough of the Anthropic Messages API: a ``Bash`` tool_use for a fresh prompt, a text
    end_turn after the tool result; token counting and side requests (titles, no tools) get text."""

    def do_GET(self) -> None:
        self.send(200, {"data": [{"id": "claude-fake", "type": "model"}], "has_more": False})

    def do_POST(self) -> None:
        request = self.body()
        if "count_tokens" in self.path:
            self.send(200, {"input_tokens": 10})
            return
        messages = [m for m in request.get("messages") or () if isinstance(m, dict)]
        results = [
            [b for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
            for m in messages
            if m.get("role") == "user" and isinstance(m.get("content"), list)
        ]
        for blocks in results:
            self.server.tool_results.extend(_text(b.get("content")) for b in blocks)
        tools = {t.get("name") for t in request.get("tools") or () if isinstance(t, dict)}
        use_tool = "Bash" in tools and not any(results)
        model = str(request.get("model") or "claude-fake")
        arguments = {"command": self.server.command, "description": "Run the command"}
        block: dict[str, Any]
        if use_tool:
            block = {"type": "tool_use", "id": f"toolu_{len(self.server.requests)}", "name": "Bash"}
            stop = "tool_use"
        else:
            block, stop = {"type": "text", "text": "Done."}, "end_turn"
        if not request.get("stream"):
            message: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant", "model": model}
            message |= {"content": [{**block, "input": arguments} if use_tool else block], "stop_reason": stop}
            self.send(200, {**message, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}})
            return
        start: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant", "model": model}
        start |= {"content": [], "stop_reason": None, "stop_sequence": None}
        start["usage"] = {"input_tokens": 10, "output_tokens": 1}
        if use_tool:
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
        else:
            first = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "Done."}
        end = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}}
        self.send_sse(
            [
                ("message_start", {"type": "message_start", "message": start}),
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": first}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {**end, "usage": {"output_tokens": 5}}),
                ("message_stop", {"type": "message_stop"}),
            ]
        )


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModel]:
    yield from serve(FakeModel(_AnthropicModel))


async def run_claude(
    binary: Path,
    model: FakeModel,
    proxy: RefusingProxy,
    tmp: Path,
    hooks: dict[str, Any],
    command: str,
    allow_bash: bool = True,
) -> Run:
    """``allow_bash``: ``--allowedTools Bash``; without it Claude Code would ask, so the
    PermissionRequest hook runs (and Claude Code denies what the hook leaves undecided)."""
    home, project = tmp / "home", tmp / "project"
    git_project(project)
    (project / ".claude").mkdir()
    home.mkdir()
    (project / ".claude" / "settings.json").write_text(json.dumps(hooks))
    env = {
        **base_env(home, proxy),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "SHELL": "/bin/bash",
    }
    argv = [str(binary), "-p", "Run the command.", "--output-format", "json"]
    argv += ["--allowedTools", "Bash"] if allow_bash else []
    return await run_agent(HARNESS, argv, cwd=project, env=env, model=model, proxy=proxy, command=command)


# --------------------------------------------------------------------------------- the tests
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_command_hook_denies_a_force_push_and_runs_a_benign_command(
    claude_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    hooks = hook_config(HARNESS, gateway.url)

    async def run(project: Path, hooks: dict[str, Any], command: str) -> Run:
        return await run_claude(claude_bin, model, proxy, project, hooks, command)

    await denies_a_force_push_and_runs_a_benign_command(HARNESS, gateway, hooks, run, tmp_path)


async def test_http_hook_denies_through_the_native_endpoint(
    claude_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    hooks = hook_config(HARNESS, gateway.url, "--http")
    run = await run_claude(claude_bin, model, proxy, tmp_path, hooks, FORCE_PUSH)
    assert not run.ran("pushed.marker")
    assert run.got(POLICY_REASON), run.tool_results


@pytest.mark.parametrize("kind", ["command", "http"])
async def test_the_permission_hook_alone_denies(
    kind: str, claude_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    """Bash not pre-allowed: Claude Code's PermissionRequest payload reaches the gateway, whose
    deny (with the policy's reason) answers the permission dialog."""
    hooks = hook_config(HARNESS, gateway.url, *(["--http"] if kind == "http" else []))
    hooks["hooks"] = {"PermissionRequest": hooks["hooks"]["PermissionRequest"]}
    run = await run_claude(claude_bin, model, proxy, tmp_path, hooks, FORCE_PUSH, allow_bash=False)
    assert not run.ran("pushed.marker")
    assert run.got(POLICY_REASON), run.tool_results


async def test_gateway_down_blocks_the_prompt(
    claude_bin: Path, model: FakeModel, proxy: RefusingProxy, tmp_path: Path
) -> None:
    """The failure table of docs/agents/claude-code.md: with the gateway stopped the command adapter denies
    UserPromptSubmit by itself (--on-error deny), so the model is never asked."""
    hooks = hook_config(HARNESS, f"http://127.0.0.1:{closed_port()}/")
    model.requests.clear()
    run = await run_claude(claude_bin, model, proxy, tmp_path, hooks, BENIGN)
    result = json.loads(run.out)
    assert "UserPromptSubmit operation blocked by hook" in result["result"], result
    assert "policy gateway could not be reached" in result["result"], result
    assert not run.ran("ran.marker")
    assert not any("/messages" in r and "count_tokens" not in r for r in model.requests), model.requests


@pytest.mark.parametrize("kind", ["command", "http"])
async def test_gateway_down_blocks_the_tool(
    kind: str, claude_bin: Path, model: FakeModel, proxy: RefusingProxy, tmp_path: Path
) -> None:
    """PreToolUse alone with the gateway stopped: the command adapter denies by itself, and the
    HTTP hook's ``onFailure: "block"`` makes Claude Code deny the refused connection."""
    hooks = hook_config(HARNESS, f"http://127.0.0.1:{closed_port()}/", *(["--http"] if kind == "http" else []))
    hooks["hooks"] = {"PreToolUse": hooks["hooks"]["PreToolUse"]}
    run = await run_claude(claude_bin, model, proxy, tmp_path, hooks, BENIGN)
    assert not run.ran("ran.marker"), run.tool_results
    expected = "policy gateway could not be reached" if kind == "command" else 'blocking because onFailure is "block"'
    assert run.got(expected), (run.tool_results, run.out, run.err)


@pytest.mark.parametrize("non_interactive", [False, True])
async def test_ask_in_a_headless_run(
    non_interactive: bool,
    claude_bin: Path,
    model: FakeModel,
    proxy: RefusingProxy,
    gateway: GatewayServer,
    tmp_path: Path,
) -> None:
    """A rule's ask in ``claude -p``: Claude Code denies it itself, nobody being there to confirm
    (an ask's reason goes to the user, not the model); with ``--non-interactive`` the model gets
    the asking rule's own fallback reason instead."""
    hooks = hook_config(HARNESS, gateway.url, *(["--non-interactive"] if non_interactive else []))
    command = "touch asked.marker && rm -rf /opt/ahp-harness-does-not-exist"  # the bundled policy asks
    run = await run_claude(claude_bin, model, proxy, tmp_path, hooks, command)
    assert not run.ran("asked.marker"), run.tool_results
    if non_interactive:
        expected = "Recursive deletes outside the workspace"
    else:
        expected = "Hook PreToolUse:Bash asked for confirmation for this tool"
    assert run.got(expected), run.tool_results
