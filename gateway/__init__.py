"""AHP Gateway: a policy-as-code reverse proxy for the Agent Hooks Protocol.

Layers (imports only point downwards): ``protocol`` ← ``settle``/``config`` ← ``routing`` /
``observability`` ← ``policy``/``credentials`` ← ``upstream`` ← ``runtime`` ← ``dispatch`` ←
``server`` ← ``cli``.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("ahp-gateway")
except _metadata.PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
