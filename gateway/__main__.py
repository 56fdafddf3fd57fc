"""``python -m gateway`` is ``ahp-gateway``."""

from gateway.cli import main

raise SystemExit(main())
