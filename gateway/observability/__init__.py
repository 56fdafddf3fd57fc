"""L2 observability, written only from above with finished records: Prometheus metrics
(``metrics``), the decision log (``decisions``), W3C trace context and optional OpenTelemetry
spans (``tracing``), combined into the engine's telemetry sink (``sink``)."""
