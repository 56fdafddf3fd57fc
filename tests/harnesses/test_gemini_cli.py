"""The real Gemini CLI (the version pinned in gemini/package-lock.json) blocked end to end by the
gateway (issue 29): ``gemini -p --yolo`` runs in a temporary HOME and project whose
``.gemini/settings.json`` holds the hooks ``ahp-gateway hook config gemini --non-interactive``
prints, against a fake Gemini API on loopback (``generateContent`` and
``streamGenerateContent``) that makes the model call ``run_shell_command`` with the command a test
chooses and finish after the tool result; side requests that ask for JSON (the CLI's classifiers)
get an instance of the request's schema. Checks: the hook fired
(``ahp_gateway_native_requests_total``), a denied force push did not run (its marker file is
absent) and the model got the policy's reason, a benign command ran, what an ``ask`` does in a
headless run with and without ``--non-interactive``, and with the gateway down the adapter blocks
(the failure table of docs/agents/gemini.md).

Nothing leaves loopback: telemetry, usage statistics and auto-update are off in
``~/.gemini/settings.json``, and ``HTTPS_PROXY`` / ``HTTP_PROXY`` point at a recording proxy that
refuses everything; a test fails when anything tried it. Without node and npm the module is
skipped.
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

HARNESS = "gemini"
TOOL = "run_shell_command"
MODEL = "gemini-2.5-flash"
USER_SETTINGS = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}


@pytest.fixture(scope="session")
def gemini_bin() -> Path:
    return installed(HARNESS) / "node_modules" / ".bin" / "gemini"


def instance(schema: Any) -> Any:
    """A small value matching a JSON schema (or Gemini's OBJECT/STRING variant): enough for the
    CLI's classifiers (an ``enum`` picks ``user`` when offered, so the next-speaker check ends
    the turn, else its first value)."""
    if not isinstance(schema, dict):
        return None
    if "enum" in schema:
        values = list(schema["enum"])
        return "user" if "user" in values else values[0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return instance(schema[key][0])
    kind = schema.get("type")
    kind = str(kind[0] if isinstance(kind, list) else kind or "object").lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: instance(sub) for name, sub in props.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return "fake"


class _GeminiModel(ModelHandler):
    """Just enough of the Gemini API: a ``run_shell_command`` call for a fresh prompt, text after
    the function response, and a schema instance for JSON-mode requests."""

    def do_GET(self) -> None:
        self.send(200, {"models": [{"name": f"models/{MODEL}"}]})

    def do_POST(self) -> None:
        request = self.body()
        if ":countTokens" in self.path:
            self.send(200, {"totalTokens": 10})
            return
        contents = [c for c in request.get("contents") or () if isinstance(c, dict)]
        answered = False
        for content in contents:
            for piece in content.get("parts") or ():
                if isinstance(piece, dict) and "functionResponse" in piece:
                    self.server.tool_results.append(json.dumps(piece["functionResponse"].get("response")))
                    answered = True
        tools = {
            d.get("name")
            for t in request.get("tools") or ()
            if isinstance(t, dict)
            for d in t.get("functionDeclarations") or ()
            if isinstance(d, dict)
        }
        config = request.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if schema is not None or config.get("responseMimeType") == "application/json":
            part: dict[str, Any] = {"text": json.dumps(instance(schema or {"type": "object"}))}
        elif TOOL in tools and not answered:
            part = {"functionCall": {"name": TOOL, "args": {"command": self.server.command}}}
        else:
            part = {"text": "Done."}
        answer = {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": MODEL,
        }
        if ":streamGenerateContent" in self.path:
            self.send_sse([(None, answer)])
        else:
            self.send(200, answer)


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModel]:
    yield from serve(FakeModel(_GeminiModel))


async def run_gemini(
    binary: Path,
    model: FakeModel,
    proxy: RefusingProxy,
    tmp: Path,
    hooks: dict[str, Any],
    command: str,
    *,
    hang_after_s: float | None = None,
    stdin_open: bool = False,
) -> Run:
    """``hang_after_s``: a run still going after that long is returned as ``hung`` (killed with
    its process group) instead of failing the test; ``stdin_open``: see :func:`run_agent`."""
    home, project = tmp / "home", tmp / "project"
    git_project(project)
    (home / ".gemini").mkdir(parents=True)
    (project / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(USER_SETTINGS))
    (project / ".gemini" / "settings.json").write_text(json.dumps(hooks))
    env = {
        **base_env(home, proxy),
        "GOOGLE_GEMINI_BASE_URL": model.url,
        "GEMINI_API_KEY": "fake-key",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",  # one node process, not a relaunched child: faster start
    }
    argv = [str(binary), "-p", "Run the command.", "--yolo", "--output-format", "json", "-m", MODEL]
    if hang_after_s is None:
        return await run_agent(HARNESS, argv, cwd=project, env=env, model=model, proxy=proxy, command=command)
    return await run_agent(
        HARNESS, argv, cwd=project, env=env, model=model, proxy=proxy, command=command,
        timeout_s=hang_after_s, may_hang=True, stdin_open=stdin_open,
    )  # fmt: skip


# --------------------------------------------------------------------------------- the tests
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_command_hook_denies_a_force_push_and_runs_a_benign_command(
    gemini_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    hooks = hook_config(HARNESS, gateway.url, "--non-interactive")

    async def run(project: Path, hooks: dict[str, Any], command: str) -> Run:
        return await run_gemini(gemini_bin, model, proxy, project, hooks, command)

    await denies_a_force_push_and_runs_a_benign_command(HARNESS, gateway, hooks, run, tmp_path)


async def test_gateway_down_blocks_the_tool(
    gemini_bin: Path, model: FakeModel, proxy: RefusingProxy, tmp_path: Path
) -> None:
    """The failure table of docs/agents/gemini.md: BeforeTool alone with the gateway stopped, the adapter denies
    the call by itself (--on-error deny)."""
    hooks = hook_config(HARNESS, f"http://127.0.0.1:{closed_port()}/", "--non-interactive")
    hooks["hooks"] = {"BeforeTool": hooks["hooks"]["BeforeTool"]}
    run = await run_gemini(gemini_bin, model, proxy, tmp_path, hooks, BENIGN)
    assert not run.ran("ran.marker"), run.tool_results
    assert run.got("policy gateway could not be reached"), (run.tool_results, run.out, run.err)


async def test_gateway_down_blocks_the_prompt(
    gemini_bin: Path, model: FakeModel, proxy: RefusingProxy, tmp_path: Path
) -> None:
    """With the gateway stopped the adapter denies BeforeAgent by itself: the model is never asked."""
    hooks = hook_config(HARNESS, f"http://127.0.0.1:{closed_port()}/", "--non-interactive")
    model.requests.clear()
    run = await run_gemini(gemini_bin, model, proxy, tmp_path, hooks, BENIGN)
    assert not run.ran("ran.marker")
    assert not any("generatecontent" in r.lower() for r in model.requests), model.requests
    warnings = json.loads(run.out).get("warnings") or []
    assert any("Agent execution blocked" in w and "policy gateway could not be reached" in w for w in warnings), run.out


# How long an asking run may go on before it counts as hung: several times what a whole run with
# a denied call takes here (5 to 8 s on a busy two-core machine).
HANG_AFTER_S = 25.0


@pytest.mark.parametrize(("stdin", "non_interactive"), [("open", False), ("at-eof", False), ("open", True)], ids=str)
async def test_ask_in_a_headless_run(
    stdin: str,
    non_interactive: bool,
    gemini_bin: Path,
    model: FakeModel,
    proxy: RefusingProxy,
    gateway: GatewayServer,
    tmp_path: Path,
) -> None:
    """A rule's ``ask`` in ``gemini -p --yolo --output-format json`` (Gemini CLI 0.61.0), where
    the BeforeTool hook answers ``ask`` and Gemini wants a confirmation nobody can give:

    - stdin open (a terminal nobody answers, a CI step whose stdin stays open): Gemini waits,
      still running at the deadline (then killed with its process group);
    - stdin at EOF (``< /dev/null``): Gemini exits 0 with no output at all (no JSON result);
    - in both, the command does not run and the model is never answered.

    With ``--non-interactive`` the asking rule's fallback deny, with its reason, reaches the
    model and the run ends normally, stdin open or not."""
    hooks = hook_config(HARNESS, gateway.url, *(["--non-interactive"] if non_interactive else []))
    command = "touch asked.marker && rm -rf /opt/ahp-harness-does-not-exist"  # the bundled policy asks
    outcome = "deny" if non_interactive else "ask"
    before = await native_requests(gateway, HARNESS, event_type="tool.before", outcome=outcome)
    run = await run_gemini(
        gemini_bin, model, proxy, tmp_path, hooks, command, hang_after_s=HANG_AFTER_S, stdin_open=stdin == "open"
    )
    # the BeforeTool hook reached the gateway, which answered as expected
    assert await native_requests(gateway, HARNESS, event_type="tool.before", outcome=outcome) == before + 1
    assert not run.ran("asked.marker"), run.tool_results
    if non_interactive:
        assert (run.hung, run.code) == (False, 0), (run.out, run.err)
        assert json.loads(run.out)["response"] == "Done."
        assert run.got("Recursive deletes outside the workspace"), run.tool_results
        return
    assert run.tool_results == []  # the model was never answered
    if stdin == "open":
        assert run.hung, ("gemini -p ended after an ask", run.code, run.out, run.err)
    else:
        assert (run.hung, run.code, run.out) == (False, 0, ""), run.err
