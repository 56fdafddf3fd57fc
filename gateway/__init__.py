"""AHP Gateway: a policy-as-code reverse proxy for the Agent Hooks Protocol.

Layers (imports only point downwards): ``protocol`` ← ``settle``/``config`` ← ``routing`` /
``observability`` ← ``policy``/``credentials`` ← ``upstream`` ← ``runtime`` ← ``dispatch`` ←
``server`` ← ``cli``.

``__version__`` is resolved on first use: package metadata costs tens of milliseconds, which the
per-tool-call ``ahp-gateway hook`` command must not pay.
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("ahp-gateway")
    except metadata.PackageNotFoundError:  # running from a source tree without installation
        version = "0.0.0+source"
    globals()["__version__"] = version
    return version
