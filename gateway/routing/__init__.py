"""L2 routing: CEL (``cel``, the only importer of the CEL library), per-request activations and
the ordered steps an event is routed to."""
