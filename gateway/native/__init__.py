"""Compatibility adapters (AHP conformance, "compatibility adapters"): native hook dialects of
coding agents in front of the same pipeline as AHP traffic.

Everything here except :mod:`gateway.native.endpoint` is stdlib-only (``gateway.protocol``'s
methods, events, errors, jsonrpc and grants included) and free of I/O apart from
:mod:`gateway.native.client` and :mod:`gateway.native.command`: the command adapter runs once per
tool call, so importing it must stay cheap (no aiohttp, pydantic, jsonschema or CEL).
"""

HARNESSES = ("claude-code", "codex", "gemini", "copilot", "cursor", "windsurf")
"""Harness names accepted by ``ahp-gateway hook <harness>`` (exact spelling)."""

HTTP_HARNESSES = ("claude-code", "copilot")
"""Harnesses whose hooks can POST to a URL themselves: they get ``POST /native/<harness>``."""
