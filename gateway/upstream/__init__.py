"""L4 upstream transports behind one small interface (:class:`base.Upstream`): they frame, bound
and send, and classify failures. They never validate AHP semantics or apply failure policy."""
