"""L1 pure chain semantics (AHP-COMP-001, protocol §8): no asyncio, no sockets, no clock.

``reply`` (what one upstream call produced), ``accept`` (atomic validation of one answer),
``fold`` (folding accepted answers into event + state) and ``collapse`` (the one effect list
for the harness).
"""
