"""Issue 28 ("a new user"): ``check`` said OK where ``serve`` then failed — missing TLS files (serve
died with a traceback naming no file), a missing tokens file, a ``tokenEnv`` that is not set.
``check`` resolves every file and credential the configuration names as ``serve`` does, each
problem a config issue with file, line, JSON path and reason (never a secret), and ``serve``
refuses to start with the same line and exit 1. README "CLI" and "Failure behaviour".
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from gateway.check_cmd import check
from tests.support.config import gateway_config, hook
from tests.support.tokens import TOKEN_A, tokens_file

SECRET = "s3cret-value-never-printed"
ENV = "AHP_PREFLIGHT_TOKEN"
SERVE_TIMEOUT = 30.0


def _baseline(tmp: Path) -> dict[str, Any]:
    """A configuration whose every file and credential resolves: each case breaks one."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    tokens_file(tmp / "tokens.yaml", (TOKEN_A, "team-a", {}))
    for name in ("upload-secret", "oauth-secret", "issuer-secret"):
        (tmp / name).write_text(SECRET + "\n")
    upstream = hook(
        "org.example.guard",
        "https://127.0.0.1:9/hook",
        caFile="ca.pem",
        authentication={"type": "bearer", "tokenEnv": ENV},
    )
    upstream["subscriptions"][0]["upload"] = {
        "endpoint": "https://127.0.0.1:9/upload",
        "timeoutMs": 500,
        "maxBytes": 1024,
        "auth": {"type": "bearer", "tokenRef": "file:upload-secret"},
    }
    oauth = hook(
        "org.example.oauth",
        "https://127.0.0.1:9/other",
        authentication={
            "type": "oauth",
            "resource": "https://127.0.0.1:9/other",
            "issuer": "https://127.0.0.1:9",
            "clientId": "gateway",
            "clientSecretRef": "file:oauth-secret",
            "flow": "client_credentials",
        },
    )
    return gateway_config(
        [upstream, oauth],
        inbound={
            "auth": {"type": "bearer", "tokensFile": "tokens.yaml"},
            "tls": {"certFile": "cert.pem", "keyFile": "key.pem", "clientCaFile": "ca.pem"},
        },
        uploads={"path": "/uploads"},
        trustedIssuers=[
            {"issuer": "https://issuer.example", "clientId": "gw", "clientSecretRef": "file:issuer-secret"}
        ],
    )


def _remove(name: str) -> Callable[[Path, dict[str, Any]], None]:
    return lambda tmp, cfg: (tmp / name).unlink()


def _write(name: str, text: str) -> Callable[[Path, dict[str, Any]], None]:
    return lambda tmp, cfg: (tmp / name).write_text(text)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Path, dict[str, Any]], None]:
    def apply(tmp: Path, cfg: dict[str, Any]) -> None:
        node = cfg
        for item in path[:-1]:
            node = node[item]
        node[path[-1]] = value

    return apply


# (id, how to break the baseline, JSON path of the issue, a fragment of the reason)
CASES: list[tuple[str, Callable[[Path, dict[str, Any]], None], str, str]] = [
    ("tokens-file-missing", _remove("tokens.yaml"), "$.inbound.auth.tokensFile", "tokens.yaml: file not found"),
    ("tokens-file-malformed", _write("tokens.yaml", "{not: a list}\n"), "$.inbound.auth.tokensFile", "must be a list"),
    ("tokens-file-directory", _set(("inbound", "auth", "tokensFile"), "."), "$.inbound.auth.tokensFile", "directory"),
    ("tls-cert-missing", _remove("cert.pem"), "$.inbound.tls.certFile", "cert.pem: file not found"),
    ("tls-key-missing", _remove("key.pem"), "$.inbound.tls.keyFile", "key.pem: file not found"),
    ("tls-key-not-a-key", _write("key.pem", "garbage\n"), "$.inbound.tls.certFile", "do not load together"),
    (
        "tls-client-ca-missing",
        _set(("inbound", "tls", "clientCaFile"), "gone.pem"),
        "$.inbound.tls.clientCaFile",
        "gone.pem: file not found",
    ),
    ("upstream-ca-missing", _set(("hooks", 0, "caFile"), "gone.pem"), "$.hooks[0].caFile", "gone.pem: file not found"),
    ("upstream-ca-not-pem", _set(("hooks", 0, "caFile"), "tokens.yaml"), "$.hooks[0].caFile", "no PEM certificate"),
    (
        "token-env-unset",
        _set(("hooks", 0, "authentication", "tokenEnv"), "AHP_PREFLIGHT_UNSET"),
        "$.hooks[0].authentication.tokenEnv",
        "AHP_PREFLIGHT_UNSET is not set",
    ),
    (
        "token-ref-env-unset",
        _set(("hooks", 0, "authentication"), {"type": "bearer", "tokenRef": "env:AHP_PREFLIGHT_UNSET"}),
        "$.hooks[0].authentication.tokenRef",
        "AHP_PREFLIGHT_UNSET is not set",
    ),
    (
        "token-ref-file-empty",
        lambda tmp, cfg: (
            _write("empty", "\n")(tmp, cfg),
            _set(("hooks", 0, "authentication"), {"type": "bearer", "tokenRef": "file:empty"})(tmp, cfg),
        ),
        "$.hooks[0].authentication.tokenRef",
        "is empty",
    ),
    (
        "upload-token-file-missing",
        _remove("upload-secret"),
        "$.hooks[0].subscriptions[0].upload.auth.tokenRef",
        "is unreadable",
    ),
    (
        "oauth-secret-unset",
        _set(("hooks", 1, "authentication", "clientSecretRef"), "env:AHP_PREFLIGHT_UNSET"),
        "$.hooks[1].authentication.clientSecretRef",
        "AHP_PREFLIGHT_UNSET is not set",
    ),
    (
        "oauth-private-key-not-a-key",
        _set(
            ("hooks", 1, "authentication"),
            {
                "type": "oauth",
                "resource": "https://127.0.0.1:9/other",
                "issuer": "https://127.0.0.1:9",
                "clientId": "gateway",
                "flow": "client_credentials",
                "tokenEndpointAuthMethod": "private_key_jwt",
                "privateKeyRef": "file:oauth-secret",
            },
        ),
        "$.hooks[1].authentication.privateKeyRef",
        "does not hold a private key",
    ),
    (
        "trusted-issuer-secret-unset",
        _set(("trustedIssuers", 0, "clientSecretRef"), "env:AHP_PREFLIGHT_UNSET"),
        "$.trustedIssuers[0].clientSecretRef",
        "AHP_PREFLIGHT_UNSET is not set",
    ),
    (
        "spool-dir-is-a-file",
        _set(("uploads",), {"path": "/uploads", "storage": {"spoolDir": "tokens.yaml"}}),
        "$.uploads.storage.spoolDir",
        "is not a directory",
    ),
    (
        "decision-log-under-a-file",
        _set(("log",), {"decisions": "tokens.yaml/decisions.log"}),
        "$.log.decisions",
        "is not a directory",
    ),
]
CASE_IDS = [case[0] for case in CASES]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv(ENV, SECRET)
    monkeypatch.delenv("AHP_PREFLIGHT_UNSET", raising=False)
    return {k: v for k, v in os.environ.items() if k != "AHP_PREFLIGHT_UNSET"}


def _config(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _line_of(path: Path, fragment: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if fragment in line)


def test_the_baseline_resolves(tmp_path: Path, env: dict[str, str]) -> None:
    """Every case below breaks one thing of a configuration that passes."""
    outcome = check(str(_config(tmp_path, _baseline(tmp_path))))
    assert outcome.code == 0, outcome.stderr


@pytest.mark.parametrize(("name", "breaks", "where", "why"), CASES, ids=CASE_IDS)
def test_check_fails_what_serve_fails_and_serve_refuses_with_the_same_line(
    name: str, breaks: Callable[[Path, dict[str, Any]], None], where: str, why: str, tmp_path: Path, env: dict[str, str]
) -> None:
    cfg = _baseline(tmp_path)
    breaks(tmp_path, cfg)
    path = _config(tmp_path, cfg)
    outcome = check(str(path))
    assert outcome.code == 1, outcome.stdout
    lines = [line for line in outcome.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, outcome.stderr
    line = lines[0]
    assert f": {where}: " in line and why in line, line
    assert "gateway.yaml:" in line.split(where)[0], f"no file and line: {line}"
    assert SECRET not in outcome.stderr
    # serve: the same line, exit 1, nothing started, no traceback
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(path)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=SERVE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("serve started although check failed")
    assert proc.returncode == 1, err
    assert "Traceback" not in err and SECRET not in err, err
    served = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(served) == 1, err
    assert _where(served[0]) == _where(line) and served[0].split(where)[1] == line.split(where)[1], (line, err)


def _where(line: str) -> tuple[str, str]:
    """(file name, line number) of an issue line."""
    match = re.search(r"([^/ ]+):(\d+): \$", line)
    assert match is not None, line
    return match.group(1), match.group(2)


def test_json_format_names_file_line_and_path(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = _baseline(tmp_path)
    cfg["hooks"][0]["authentication"]["tokenEnv"] = "AHP_PREFLIGHT_UNSET"
    path = _config(tmp_path, cfg)
    body = json.loads(check(str(path), fmt="json").stdout)
    assert body["ok"] is False
    (error,) = body["errors"]
    assert error["path"] == "$.hooks[0].authentication.tokenEnv"
    assert error["line"] == _line_of(path, "tokenEnv:")


def test_no_resolve_checks_the_configuration_alone(tmp_path: Path, env: dict[str, str]) -> None:
    """Where the secrets are not mounted (CI, the chart's ``helm test`` pod)."""
    cfg = _baseline(tmp_path)
    (tmp_path / "tokens.yaml").unlink()
    (tmp_path / "upload-secret").unlink()
    cfg["hooks"][0]["authentication"]["tokenEnv"] = "AHP_PREFLIGHT_UNSET"
    path = _config(tmp_path, cfg)
    assert check(str(path)).code == 1
    outcome = check(str(path), resolve=False)
    assert outcome.code == 0, outcome.stderr


def test_a_configuration_from_stdin_gets_lines_too(tmp_path: Path, env: dict[str, str], monkeypatch) -> None:
    cfg = _baseline(tmp_path)
    cfg["hooks"][0]["authentication"]["tokenEnv"] = "AHP_PREFLIGHT_UNSET"
    text = yaml.safe_dump(cfg, sort_keys=False)
    monkeypatch.chdir(tmp_path)
    outcome = check("-", stdin_text=text)
    assert outcome.code == 1
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "tokenEnv:" in x)
    assert f"<stdin>:{line}: $.hooks[0].authentication.tokenEnv: " in outcome.stderr, outcome.stderr
