"""Differential equivalence (AHP-COMP-001, protocol §8.5): the same random scenario settled by the
SDK harness calling N SDK backends directly, and by the SDK harness → gateway → the same N
backends, gives the same settled permission, effective input, candidate, messages, injections
and flow."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.support.config import gateway_config
from tests.support.sdk_peers import SdkBackend, harness, registration, serve_backends, settled, tool_before

TIMEOUT_MS = 2000
SLOW_S = 2.6
# generous: the SDK harness needs tens of ms per call, and a loaded 2-core CI machine can stretch
# that past a second; a backend that answers must never be mistaken for one that timed out

_text = st.sampled_from(["a", "b", "c"])
_value = st.dictionaries(
    st.sampled_from(["command", "cwd", "timeout", "env"]), st.one_of(st.integers(0, 3), _text, st.none()), max_size=2
)
_message_list = st.just(
    [
        {
            "id": "inj",
            "role": "system",
            "parts": [{"id": "inj-p", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": "ctx"}],
        }
    ]
)

EFFECT = st.one_of(
    st.builds(lambda r: {"type": "deny", "reason": r, "code": f"org.example.{r}"}, _text),
    st.just({"type": "allow"}),
    st.just({"type": "ask"}),
    st.builds(lambda t: {"type": "message", "text": t}, _text),
    st.builds(
        lambda op, v: {"type": "modify", "target": "input", "operation": op, "value": v},
        st.sampled_from(["replace", "merge"]),
        _value,
    ),
    st.builds(lambda v: {"type": "return", "value": {"stdout": v}}, _text),
    st.builds(lambda r: {"type": "flow", "operation": "stop", "reason": r}, _text),
    st.builds(
        lambda at, v: {"type": "inject", "target": "context", "operation": "append", "deliverAt": at, "value": v},
        st.sampled_from(["now", "next_turn"]),
        _message_list,
    ),
)
_EFFECTS = st.tuples(st.just("effects"), st.lists(EFFECT, max_size=3))
BEHAVIOUR = st.one_of(
    _EFFECTS,
    _EFFECTS,
    _EFFECTS,
    _EFFECTS,
    _EFFECTS,
    _EFFECTS,
    st.tuples(st.just("timeout"), st.just([])),
    st.tuples(st.just("error"), st.just([])),
    st.tuples(st.just("garbage"), st.just([])),
)
SCENARIO = st.lists(st.tuples(BEHAVIOUR, st.sampled_from(["fail-open", "fail-closed"])), min_size=1, max_size=4)


def _backend(kind: str, effects: list[dict[str, Any]]) -> SdkBackend:
    async def behave(ctx: Any) -> Any:
        if kind == "timeout":
            await asyncio.sleep(SLOW_S)
            return ()
        if kind == "error":
            raise RuntimeError("backend bug")
        return effects

    backend = SdkBackend(behave)
    if kind == "garbage":
        backend.raw = lambda message: (200, b"<html>not json</html>")
    return backend


async def _run(
    scenario: list[tuple[tuple[str, list[dict[str, Any]]], str]], workdir: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    backends = [_backend(kind, effects) for (kind, effects), _ in scenario]
    async with serve_backends(backends) as urls:
        ids = [f"org.example.backend{i}" for i in range(len(urls))]
        direct_reg = registration([(i, u, p, TIMEOUT_MS) for i, u, (_, p) in zip(ids, urls, scenario, strict=True)])
        async with harness(direct_reg) as hooks:
            direct = settled(await tool_before(hooks, "git status"))

        cfg = gateway_config(
            [
                {
                    "id": i,
                    "transport": {"type": "http", "url": u},
                    "subscriptions": [
                        {
                            "mode": "intercept",
                            "events": ["tool.before"],
                            "timeoutMs": TIMEOUT_MS,
                            "failurePolicy": p,
                            "content": {"default": "body"},
                        }
                    ],
                }
                for i, u, (_, p) in zip(ids, urls, scenario, strict=True)
            ]
        )
        cfg["limits"]["deadlineMs"] = 4 * TIMEOUT_MS + 4000  # four timeouts in series still settle
        path = workdir / "gateway.yaml"
        path.write_text(yaml.safe_dump(cfg))
        server = GatewayServer(load(path))
        await server.start()
        try:
            reg = registration([("org.example.gateway", server.url, "fail-closed", 4 * TIMEOUT_MS + 8000)])
            async with harness(reg, read_timeout=(4 * TIMEOUT_MS + 8000) / 1000) as hooks:
                via = settled(await tool_before(hooks, "git status"))
        finally:
            await server.stop()
    return direct, via


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(scenario=SCENARIO)
def test_gateway_settles_like_the_harness_itself(scenario, tmp_path):
    direct, via = asyncio.run(_run(scenario, tmp_path))
    assert via == direct, scenario


def test_fixed_regressions(tmp_path):
    """Scenarios worth pinning: modify after allow, return then change, fail-closed after state."""
    cases = [
        [
            (("effects", [{"type": "allow"}]), "fail-closed"),
            (
                ("effects", [{"type": "modify", "target": "input", "operation": "merge", "value": {"x": 1}}]),
                "fail-closed",
            ),
        ],
        [
            (
                ("effects", [{"type": "return", "value": {"stdout": "a"}}, {"type": "message", "text": "m"}]),
                "fail-open",
            ),
            (("effects", [{"type": "modify", "target": "input", "operation": "replace", "value": {}}]), "fail-open"),
        ],
        [
            (("effects", [{"type": "ask"}, {"type": "message", "text": "a"}]), "fail-open"),
            (("garbage", []), "fail-closed"),
            (("effects", [{"type": "allow"}]), "fail-open"),
        ],
        [
            (
                (
                    "effects",
                    [{"type": "modify", "target": "input", "operation": "merge", "value": {"a": 1}}, {"type": "allow"}],
                ),
                "fail-open",
            ),
            (
                ("effects", [{"type": "modify", "target": "input", "operation": "merge", "value": {"a": 1}}]),
                "fail-open",
            ),
        ],
    ]
    for scenario in cases:
        direct, via = asyncio.run(_run(scenario, tmp_path))
        assert via == direct, scenario
