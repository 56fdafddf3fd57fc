"""A -32600 answer says which member failed and how (path and keyword, never the value)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.pipeline.frontend import Rejected
from gateway.pipeline.frontend import check as frontend_check
from gateway.protocol import schemas
from gateway.protocol.errors import RpcCode

# --- -32600 carries the reason -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "path", "keyword"),
    [
        (b"[]", "", "type"),
        (b'{"jsonrpc": "2.0", "id": {"no": 1}, "method": "hooks/intercept", "params": {}}', "/id", "type"),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "hooks/intercept", "params": {}}', "/jsonrpc", "const"),
        (b'{"id": 1, "method": "hooks/intercept", "params": {}}', "/jsonrpc", "required"),
        (b'{"jsonrpc": "2.0", "id": 1, "params": {}}', "/method", "required"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 7, "params": {}}', "/method", "type"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "hooks/intercept", "params": "s3cr3t-token"}', "/params", "type"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "hooks/observe", "params": {}}', "/id", "not"),
    ],
    ids=["batch", "id", "version", "no-version", "no-method", "method-type", "params-type", "observe-with-id"],
)
def test_invalid_request_names_the_member_and_keyword(body: bytes, path: str, keyword: str) -> None:
    checked: Any = frontend_check(body, ("draft",), schemas.load())
    assert isinstance(checked, Rejected) and checked.code == RpcCode.INVALID_REQUEST
    assert checked.data == {"path": path, "keyword": keyword}
    assert "s3cr3t" not in json.dumps(checked.data)  # never the value
