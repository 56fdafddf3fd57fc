"""Attachment bytes (protocol §13.2): the gateway's own upload receiver (store) and the
per-upstream re-upload that turns the harness's refs into each upstream's refs (forward)."""
