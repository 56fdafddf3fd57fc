"""The harness-facing HTTP binding without I/O: the socket adapters in :mod:`gateway.server`
feed it bytes and header values and write what it returns, so the rules exist once.

- :mod:`gateway.binding.rules`: what an AHP endpoint answers (judge a request, frame an answer)
  and the bounded content-coding decoder;
- :mod:`gateway.binding.h1`: the fast lane's HTTP/1.1 request reader (bytes in, events out) and
  its response serializer.
"""
