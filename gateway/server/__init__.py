"""L7 network front ends: the harness-facing HTTP binding, the admin listener and the process
lifecycle (signals, reload, drain). Only this package imports ``aiohttp.web``."""
