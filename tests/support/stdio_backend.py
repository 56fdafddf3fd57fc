"""An SDK backend served over stdio (``python -m tests.support.stdio_backend [mode]``), used as a real
stdio upstream. Modes: ``sdk`` (deny on --force), ``garbage`` (prints a non-JSON line),
``exit3`` (answers then exits 3), ``hang`` (never answers)."""

from __future__ import annotations

import sys
import time


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "sdk"
    if mode == "garbage":
        sys.stdin.readline()
        print("this is not json", flush=True)
        return
    if mode == "hang":
        sys.stdin.readline()
        time.sleep(60)
        return
    import anyio
    from agenthooksprotocol import _models
    from agenthooksprotocol.server import hooks, serve

    def on_tool_before(ctx):  # type: ignore[no-untyped-def]
        command = str((ctx.event.tool.input or {}).get("command", ""))
        if "--force" in command:
            return hooks.ToolBeforeReply(
                effects=(_models.DenyEffect.from_dict({"type": "deny", "reason": "stdio says no"}),)
            )
        return hooks.ToolBeforeReply()

    seen = []
    handlers = hooks.Handlers(
        intercept=hooks.InterceptHandlers(tool_before=on_tool_before),
        observe=hooks.ObserveHandlers(any=lambda ctx: seen.append(ctx.event.id)),
    )
    anyio.run(serve, handlers)
    if mode == "exit3":
        sys.exit(3)


if __name__ == "__main__":
    main()
