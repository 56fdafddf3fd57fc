"""L0 wire vocabulary of AHP: no network, no asyncio, no clock.

``jsonrpc`` (envelopes as dicts), ``wire`` (their JSON encoding), ``methods``, ``errors`` (codes),
``grants`` (the capability grant rule), ``schemas`` (canonical schemas compiled once), ``events``
(names, effect types, wildcards, modify targets), ``capabilities`` (narrowing) and ``content``
(per-subscription content projection). ``methods``, ``events``, ``errors``, ``jsonrpc`` and
``grants`` import only the standard library: the native adapters use them.
"""
