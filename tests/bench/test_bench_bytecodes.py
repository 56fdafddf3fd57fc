"""``bench.bytecodes`` (docs/design/performance.md): the live S2 gateway's bytecodes per request, by
function, counted only for the requests sent after counting was switched on."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.paths import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bytecodes import measure  # noqa: E402


def test_bytecodes_per_request_name_the_request_path(tmp_path: Path) -> None:
    counts = measure("S2", 32, tmp_path)
    # every counted request runs the reader, the pipeline and the answer once
    assert counts["gateway/binding/h1.py:read_head"] > 20
    assert counts["gateway/pipeline/gateway.py:Gateway.handle"] > 5
    assert counts["gateway/pipeline/frontend.py:check"] > 20
    assert any(name.endswith("(Exchange)") for name in counts), sorted(counts)[:20]
    assert 1000 < sum(counts.values()) < 20000  # per request, not the warm-up's total
