"""CEL routing through the live gateway: ``when`` on hooks entries and subscriptions, onError,
request headers exposed by allow-list, and NUL bytes that cannot hide text from a route."""

from __future__ import annotations

import json

from tests.support.client import post
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before
from tests.support.telemetry import Capture


async def test_hook_and_subscription_when(gateway_factory, stub_factory, http):
    shell_only = await stub_factory()
    git_only = await stub_factory()
    a = hook("org.example.shell", shell_only.url, when='event.tool.name == "shell"')
    b = hook("org.example.git", git_only.url)
    b["subscriptions"][0]["when"] = 'event.tool.input.command.startsWith("git ")'
    gw = await gateway_factory(gateway_config([a, b]))
    await post(http, gw.url, intercept(tool_before("git status")))
    await post(http, gw.url, intercept(tool_before("ls")))
    other = tool_before("git log")
    other["tool"]["name"] = "Bash"
    await post(http, gw.url, intercept(other))
    assert [r["params"]["event"]["tool"]["input"]["command"] for r in shell_only.received] == ["git status", "ls"]
    assert [r["params"]["event"]["tool"]["input"]["command"] for r in git_only.received] == ["git status", "git log"]


async def test_on_error_match_is_the_default_and_skip_is_allowed(gateway_factory, stub_factory, http):
    matched, skipped = await stub_factory(), await stub_factory()
    a = hook("org.example.match", matched.url, when='event.tool.input.path == "/etc"')
    b = hook("org.example.skip", skipped.url, when='event.tool.input.path == "/etc"', onError="skip")
    capture = Capture()
    gw = await gateway_factory(gateway_config([a, b]), telemetry=capture)
    await post(http, gw.url, intercept(tool_before("ls")))  # no "path" key: evaluation error
    assert len(matched.received) == 1
    assert skipped.received == []
    assert capture.cel_errors == ["org.example.match.when", "org.example.skip.when"]


async def test_headers_are_exposed_only_when_allow_listed(gateway_factory, stub_factory, http):
    up = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [hook("org.example.a", up.url, when='headers["x-tenant"] == "acme" && !("authorization" in headers)')],
            headers=["X-Tenant"],
        )
    )
    body = json.dumps(intercept(tool_before()))
    for tenant in ("acme", "other"):
        async with http.post(
            gw.url,
            data=body,
            headers={"Content-Type": "application/json", "X-Tenant": tenant, "Authorization": "Bearer x"},
        ) as resp:
            assert resp.status == 200
    assert len(up.received) == 1


async def test_nul_cannot_hide_a_command_from_routing(gateway_factory, stub_factory, http):
    guard = await stub_factory(lambda r: result(r, [{"type": "deny", "reason": "destructive"}]))
    gw = await gateway_factory(
        gateway_config([hook("org.example.guard", guard.url, when='event.tool.input.command.matches("rm\\\\s+-rf")')])
    )
    _, body = await post(http, gw.url, intercept(tool_before("echo hi\u0000; rm -rf /")))
    assert body["result"]["effects"][0]["reason"] == "destructive"
    # the upstream still receives the original bytes
    assert guard.received[0]["params"]["event"]["tool"]["input"]["command"] == "echo hi\u0000; rm -rf /"


async def test_routing_is_evaluated_for_observations_too(gateway_factory, stub_factory, http):
    from tests.support.client import wait_for

    audit = await stub_factory()
    entry = {
        "id": "org.example.audit",
        "transport": {"type": "http", "url": audit.url},
        "when": 'event.tool.name == "shell"',
        "subscriptions": [{"mode": "observe", "events": ["tool.*"], "content": {"default": "body"}}],
    }
    gw = await gateway_factory(gateway_config([entry]))
    other = tool_before()
    other["tool"]["name"] = "Read"
    for event in (other, tool_before()):
        await post(
            http,
            gw.url,
            {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}},
        )
    await wait_for(lambda: len(audit.observed) == 1)
    await gw.gateway.drain(2)
    assert [o["params"]["event"]["tool"]["name"] for o in audit.observed] == ["shell"]


async def test_routing_can_read_the_parsed_facts_and_quoting_does_not_evade_it(gateway_factory, stub_factory, http):
    """A ``when`` on ``facts`` sees the parsed command (quotes, wrappers, ``bash -c``), not the
    raw string: the evasions route like the plain spelling, a mere mention of ``rm`` does not."""
    guard = await stub_factory()
    when = 'facts.commands.exists(c, c.program == "rm")'
    gw = await gateway_factory(gateway_config([hook("org.example.rm-guard", guard.url, when=when)]))
    routed = ["rm -rf /tmp/x", '"r""m" -rf /tmp/x', "sudo -u root rm x", "bash -c 'rm -rf x'", "\\rm x"]
    for command in [*routed, "echo rm -rf", "grep rm notes.txt"]:
        status, _ = await post(http, gw.url, intercept(tool_before(command)))
        assert status == 200
    assert [r["params"]["event"]["tool"]["input"]["command"] for r in guard.received] == routed


async def test_a_nul_cannot_cut_a_command_short_in_the_facts(gateway_factory, stub_factory, http):
    """The facts are derived from the NUL-sanitised event, as local policies always saw them: a
    NUL before ``rm`` neither ends the parsed command nor hides the second one."""
    guard = await stub_factory()
    when = 'facts.commands.exists(c, c.program == "rm")'
    gw = await gateway_factory(gateway_config([hook("org.example.rm-guard", guard.url, when=when)]))
    status, _ = await post(http, gw.url, intercept(tool_before("echo hi\u0000; rm -rf /")))
    assert status == 200
    assert len(guard.received) == 1
    assert guard.received[0]["params"]["event"]["tool"]["input"]["command"] == "echo hi\u0000; rm -rf /"
