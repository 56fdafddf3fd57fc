"""The shared guard of ``bench.soak_tenants``: an AHP stdio backend (one request per line) that
denies force pushes with its own pid as the reason (which child answered), answers no objection
otherwise, and takes 0.8 s over a command containing ``slow``. Every start appends its pid to the
file named by ``STARTS_FILE``."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    starts = os.environ.get("STARTS_FILE")
    if starts:
        with open(starts, "a") as f:
            f.write(f"{os.getpid()}\n")
    for raw in sys.stdin:
        request = json.loads(raw)
        if "id" not in request:
            continue
        params = request["params"]
        command = str(params["event"].get("tool", {}).get("input", {}).get("command", ""))
        if "slow" in command:
            time.sleep(0.8)
        effects = [{"type": "deny", "reason": f"pid {os.getpid()}"}] if "--force" in command else []
        result = {"protocolVersion": params["protocolVersion"], "effects": effects}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
