"""Route selection: which subscriptions' CEL ``when`` conditions hold for one activation.

One function for intercept, shadow and observe routing and for ``explain``, so they cannot
disagree. An evaluation error follows the route's ``onError`` (``match`` keeps the route, ``skip``
drops it) and is reported to the caller's ``on_error``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from gateway.routing.cel import Activation, EvalError, Program


class Conditional(Protocol):
    @property
    def when(self) -> tuple[Program, ...]: ...
    @property
    def skip_on_error(self) -> tuple[bool, ...]: ...


R = TypeVar("R", bound=Conditional)
ErrorSink = Callable[[Program, EvalError], None]


def verdicts(route: Conditional, activation: Activation | None) -> list[tuple[Program, bool | EvalError]]:
    """Every condition's result in order (for ``explain``; evaluation does not stop early)."""
    if not route.when:
        return []
    assert activation is not None, "a route with conditions needs an activation"
    return [(program, program.eval(activation)) for program in route.when]


def holds(route: Conditional, activation: Activation | None, on_error: ErrorSink | None = None) -> bool:
    """Whether every ``when`` of ``route`` holds (stops at the first false one)."""
    for program, skip in zip(route.when, route.skip_on_error, strict=True):
        assert activation is not None, "a route with conditions needs an activation"
        result = program.eval(activation)
        if isinstance(result, EvalError):
            if on_error is not None:
                on_error(program, result)
            if skip:
                return False
        elif not result:
            return False
    return True


def select(
    routes: Sequence[R], activation: Activation | None, on_error: ErrorSink | None = None
) -> tuple[list[R], list[R]]:
    """(routes whose conditions hold, routes filtered out), both in chain order."""
    selected: list[R] = []
    dropped: list[R] = []
    for route in routes:
        if not route.when or holds(route, activation, on_error):
            selected.append(route)
        else:
            dropped.append(route)
    return selected, dropped
