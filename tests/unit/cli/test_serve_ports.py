"""``serve`` takes its ports from ``--port``/``--admin-port``, else from ``AHP_GATEWAY_PORT``/
``AHP_GATEWAY_ADMIN_PORT``, else from the configuration (docs/reference/cli.md): the manual's
commands run as written on other ports. A value that is not a port is refused by name, before
anything is loaded or bound."""

from __future__ import annotations

import pytest

from gateway.cli import ADMIN_PORT_ENV, PORT_ENV, _port_or_env, main


@pytest.mark.parametrize("name", [PORT_ENV, ADMIN_PORT_ENV])
@pytest.mark.parametrize("value", ["http", "-1", "65536", "80 81", "0x50"])
def test_a_value_that_is_not_a_port_is_refused_by_name(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(name, value)
    assert main(["serve", "--config", "/nonexistent/gateway.yaml"]) == 2
    assert f"${name} must be a port number from 0 to 65535, not {value!r}" in capsys.readouterr().err


def test_a_flag_wins_over_the_environment_and_an_empty_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_ENV, "18080")
    assert _port_or_env(9000, PORT_ENV) == 9000
    assert _port_or_env(None, PORT_ENV) == 18080
    monkeypatch.setenv(PORT_ENV, " ")
    assert _port_or_env(None, PORT_ENV) is None
