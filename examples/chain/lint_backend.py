"""A minimal AHP backend over stdio (one JSON object per line), standard library only: it adds a
message to shell commands that run with sudo. Used by examples/chain/gateway.yaml."""

import json
import sys


def answer(request: dict) -> dict:
    params = request["params"]
    tool = params["event"].get("tool") or {}
    command = str((tool.get("input") or {}).get("command", ""))
    effects = []
    if command.startswith("sudo ") and "message" in params["capabilities"].get("effects", []):
        effects.append({"type": "message", "text": "lint: this command runs as root."})
    return {
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {"protocolVersion": params["protocolVersion"], "effects": effects},
    }


for line in sys.stdin:
    message = json.loads(line)
    if "id" in message and message.get("method") == "hooks/intercept":  # notifications get no answer
        sys.stdout.write(json.dumps(answer(message)) + "\n")
        sys.stdout.flush()
