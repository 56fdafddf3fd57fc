"""L0 wire vocabulary of AHP: no network, no asyncio, no clock.

``wire`` (JSON and JSON-RPC envelopes), ``errors`` (codes), ``schemas`` (canonical schemas compiled
once), ``events`` (names, wildcards, modify targets), ``capabilities`` (narrowing) and ``content``
(per-subscription content projection).
"""
