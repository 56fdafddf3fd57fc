"""Install the pinned agents of the real-agent tests: ``npm ci`` of every
``tests/harnesses/<name>/package-lock.json`` into ``.cache/harnesses/<name>`` (gitignored),
skipped when the copy there was made from the same lock file (a SHA-256 stamp).

Standard library only, so ``.ci/run`` can call it before the virtualenv exists
(``python3 tests/harnesses/install.py [name ...]``); the test fixtures call :func:`install`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE_ROOT = ROOT / ".cache" / "harnesses"
STAMP = ".lock-sha256"


class InstallError(RuntimeError):
    pass


def packages() -> list[str]:
    """The names of the pinned package directories (those holding a package-lock.json)."""
    return sorted(p.parent.name for p in HERE.glob("*/package-lock.json"))


def install(name: str) -> Path:
    """``.cache/harnesses/<name>``, installed from ``tests/harnesses/<name>`` when its stamp is stale."""
    npm = shutil.which("npm")
    if not npm or not shutil.which("node"):
        raise InstallError("node and npm are not installed")
    package, cache = HERE / name, CACHE_ROOT / name
    digest = hashlib.sha256((package / "package-lock.json").read_bytes()).hexdigest()
    stamp = cache / STAMP
    if stamp.exists() and stamp.read_text() == digest and (cache / "node_modules").is_dir():
        return cache
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    for file in ("package.json", "package-lock.json"):
        shutil.copy(package / file, cache / file)
    # --ignore-scripts: the agents' postinstall steps only relink or download what the
    # platform's optional dependency already holds; the fixtures run that binary directly.
    proc = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
        cwd=cache,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise InstallError(f"npm ci of the pinned {name} package failed:\n{proc.stderr[-2000:]}")
    stamp.write_text(digest)
    return cache


def main(argv: list[str]) -> int:
    for name in argv or packages():
        print(f"real-agent tests: {name} installed in {install(name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
