"""L3 outbound credentials: bearer tokens from environment variables or files (re-read when the
file changes), OAuth client credentials. Secret values never leave this package except inside one
``Authorization`` header."""
