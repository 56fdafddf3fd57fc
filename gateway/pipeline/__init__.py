"""The request path, one stage per module (docs/design/development.md):

binding (HTTP / stdio / native)  →  gateway.Gateway.handle(bytes, headers, principal) → exchange.Exchange
  frontend.check   bytes → Rejected | Notification | Discovery | Intercept   (pure)
  intercept.Intercepts.run
    routing.context  the CEL activation (once per request)
    routing.select   which subscriptions' `when` hold
    shadow           background calls of shadow routes
    chain.run_*      call.call_upstream per route (breaker → transport → atomic accept),
                     settle.fold (ChainState.fold) → Settlement
    verdict          attribution / synthetic deny / collapse / self-validation → Decision
  observe.Observer   queue and deliver hooks/observe (ledger marked when calls are sent)
  exchange.Exchange  the answer with what happened (Decision, rejection, observation status),
                     recorded once by telemetry in Gateway.handle

Assembled (pool, holder, telemetry, uploads, capture) by :mod:`gateway.assemble`.
"""
