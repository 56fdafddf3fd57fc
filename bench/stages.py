"""One stage of an S8 decision, in process, for ``bench.instructions --stages`` to count under
callgrind: ``python -m bench.stages STAGE N SEED`` prepares the same renamed real calls whatever
``N`` is (a warm-up from the end of pass 1, then the calls of pass 2) and runs ``N`` of them through
``STAGE``, so two runs that differ only in ``N`` differ by exactly ``N`` calls of that stage.

Stages (each includes the ones above it):

- ``facts``: deriving the policy facts of the call (``gateway.policy.facts.for_event``: the
  shell walk with tree-sitter, the program table, the effects);
- ``decision``: ``Gateway.handle`` on the bundled default without telemetry (the front end's
  parse and validation, routing, the local backend: memo, facts, rule index, CEL; settlement,
  the answer's encoding);
- ``logged``: the same with the default's telemetry (decision log to a file, metrics);
- ``rest`` and ``rest-logged``: ``decision`` and ``logged`` with the facts of every prepared call
  derived before the count (looked up by event id instead): everything in a decision but the
  facts. Run both counts with ``PYTHONHASHSEED=0`` so their sets are laid out alike.

The HTTP server's share is the live S8 count (``bench.instructions --only S8``) less ``logged``.
"""

from __future__ import annotations

import asyncio
import sys

import orjson

from bench import inprocess, realmix

STAGES = ("facts", "decision", "logged", "rest", "rest-logged")
WARM = 300
PREPARED = 2000
"""Calls prepared (renamed and encoded) in every run, counted or not: the preparation is the
same in both runs and cancels out."""


def main(argv: list[str]) -> None:
    stage, n, seed = argv[0], int(argv[1]), int(argv[2])
    if stage not in STAGES or not 0 <= n <= PREPARED:
        raise SystemExit(f"usage: python -m bench.stages {{{','.join(STAGES)}}} N(0..{PREPARED}) SEED")
    mix = realmix.Mix(realmix.load_cases(), seed)
    size = len(mix.cases)
    warm = list(mix.bodies(1, WARM, start=size - WARM))
    bodies = list(mix.bodies(2, PREPARED))
    if stage == "facts":
        from gateway.policy.facts import for_event

        events = [orjson.loads(b)["params"]["event"] for b in (*warm, *bodies)]
        for event in events[:WARM]:
            for_event(event)
        for event in events[WARM : WARM + n]:
            for_event(event)
        return
    if stage.startswith("rest"):
        _facts_known([*warm, *bodies])
    gw = inprocess.gateway(True, telemetry=stage in ("logged", "rest-logged"))
    asyncio.run(inprocess.measure_mix(gw, [], warm))
    if n:
        asyncio.run(inprocess.measure_mix(gw, [], bodies[:n]))


def _facts_known(bodies: list[bytes]) -> None:
    """Derive the facts of ``bodies`` now; a decision then looks its event's up by id."""
    from gateway.policy import facts

    known = {}
    for body in bodies:
        event = orjson.loads(body)["params"]["event"]
        known[event["id"]] = facts.for_event(event)
    facts.for_event = lambda event: known[event["id"]]


if __name__ == "__main__":
    main(sys.argv[1:])
