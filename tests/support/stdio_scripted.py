"""A scripted stdio backend (``python -m tests.support.stdio_scripted MODE [ARG]``), one request per line.

Modes (the answer echoes the request's protocolVersion):
- ``fixture DIR``: answers with the first line of ``DIR/<tool input command>`` verbatim (golden
  response fixtures played by a real child process);
- ``sleep SECONDS``: answers ``effects: []`` after SECONDS (pool concurrency);
- ``banner``: prints a banner line on stdout before serving (forbidden by AHP-STDIO-001);
- ``crash-on MARKER [pid]`` / ``hang-on MARKER [pid]``: exits 1 / never answers when the command
  contains MARKER, otherwise answers ``effects: []`` (with ``pid``: as the ``pid`` mode does);
- ``pid``: denies with reason ``pid <n>`` (which child answered); ``slow-pid SECONDS``: the same
  after SECONDS;
- ``stderr N``: writes N long lines on stderr, then answers ``effects: []``.
Every start appends ``<pid>`` to the file named by ``STARTS_FILE`` when that variable is set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def answer(request: dict, effects: list) -> None:
    version = request["params"]["protocolVersion"]
    line = {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": version, "effects": effects}}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def command_of(request: dict) -> str:
    tool = request["params"]["event"].get("tool", {})
    return str(tool.get("input", {}).get("command", ""))


def main() -> None:
    mode = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else ""
    starts = os.environ.get("STARTS_FILE")
    if starts:
        with open(starts, "a") as f:
            f.write(f"{os.getpid()}\n")
    if mode == "banner":
        print("backend v1.2 ready", flush=True)
    for raw in sys.stdin:
        request = json.loads(raw)
        if "id" not in request:
            continue  # notifications get no answer
        command = command_of(request)
        if mode == "fixture":
            sys.stdout.write((Path(arg) / command).read_text().splitlines()[0] + "\n")
            sys.stdout.flush()
        elif mode == "sleep":
            time.sleep(float(arg))
            answer(request, [])
        elif mode == "crash-on" and arg in command:
            sys.exit(1)
        elif mode == "hang-on" and arg in command:
            time.sleep(60)
        elif mode == "slow-pid":
            time.sleep(float(arg))
            answer(request, [{"type": "deny", "reason": f"pid {os.getpid()}"}])
        elif mode == "pid" or (mode in ("crash-on", "hang-on") and sys.argv[3:4] == ["pid"]):
            answer(request, [{"type": "deny", "reason": f"pid {os.getpid()}"}])
        elif mode == "stderr":
            for i in range(int(arg)):
                sys.stderr.write(f"diagnostic {i} " + "x" * 5000 + "\n")
            sys.stderr.flush()
            answer(request, [])
        else:
            answer(request, [])


if __name__ == "__main__":
    main()
