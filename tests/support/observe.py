"""Observation helpers: the note a stub reads from an observed event, and an observe-mode hook."""

from __future__ import annotations


def note(event):
    return {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}}


def observer(hook_id, url, content="body"):
    return {
        "id": hook_id,
        "transport": {"type": "http", "url": url},
        "subscriptions": [{"mode": "observe", "events": ["*"], "content": {"default": content}}],
    }
