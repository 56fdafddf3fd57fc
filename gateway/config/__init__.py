"""L1 configuration: pydantic models for ``gateway.yaml`` and AHP registration documents, and a
loader whose every error names the file, the JSON path (and line) and the reason."""
