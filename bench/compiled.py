"""The compiled build for the benchmarks: ``python -m bench.compiled`` compiles the policy
backend's hot path with mypyc (``AHP_GATEWAY_MYPYC=1``, setup.py) in a copy of the sources under
``.cache/compiled/<hash of the sources>/`` and prints that directory;
``python -m bench.compiled COMMAND...`` runs a command on that build (from that directory, with
it and the checkout on ``PYTHONPATH``: the gateway from the copy, ``bench`` from the checkout):

    python -m bench.compiled python -m bench.run --only S0n,S8
    python -m bench.compiled python -m bench.inprocess --mix --seed 1

measure the gateway as the image ships it (the report's machine line says ``facts compiled``).
The checkout itself stays interpreted: a compiled module beside its source would shadow every
later edit of it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("setup.py", "pyproject.toml", "README.md", "LICENSE")


def fingerprint(repo: Path = REPO) -> str:
    digest = hashlib.sha256()
    for path in sorted([*(repo / n for n in SOURCES), *(repo / "gateway").rglob("*.py")]):
        digest.update(path.relative_to(repo).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build(dest: Path, repo: Path = REPO, timeout: float = 900) -> Path:
    """Copy the sources to ``dest`` and compile there, in place, what setup.py compiles; ``dest``
    is then importable."""
    for name in SOURCES:
        shutil.copy2(repo / name, dest / name)
    shutil.copytree(repo / "gateway", dest / "gateway", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    proc = subprocess.Popen(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=dest,
        env={**os.environ, "AHP_GATEWAY_MYPYC": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the compiler's children go with it on a timeout
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError("mypyc build failed:\n" + out.decode(errors="replace")[-4000:])
    return dest


def cached(repo: Path = REPO) -> Path:
    dest = repo / ".cache" / "compiled" / fingerprint(repo)
    if (dest / ".built").exists():
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    build(partial, repo)
    (partial / ".built").touch()
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    return dest


def main(argv: list[str]) -> None:
    tree = cached()
    if not argv:
        print(tree)
        return
    path = os.pathsep.join(p for p in (str(tree), str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    program = os.path.abspath(shutil.which(argv[0]) or argv[0])
    os.chdir(tree)
    os.execve(program, [program, *argv[1:]], {**os.environ, "PYTHONPATH": path})


if __name__ == "__main__":
    main(sys.argv[1:])
