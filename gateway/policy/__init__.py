"""L3 the local policy backend: CEL rules from policy files (``library``), evaluated in-process as
one more upstream of the chain (``backend``), and their built-in tests (``cases``)."""
