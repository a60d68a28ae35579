"""A demo service: every request is one AsyncSteps flow.

``server.py`` is an AnyIO TCP server speaking line-delimited JSON; each request
goes through a :class:`~futoin_anyio.Limiter` (concurrency and rate), under a
per-request ``set_timeout()``, and fans out with ``parallel()`` to two
simulated back-ends whose cancel handlers release their connections.  When a
client hangs up mid-request, the flow is cancelled.  ``client.py`` is a load
generator; ``demo.py`` runs both for a few seconds and prints a summary.

    python -m examples.service.demo --duration 10 [--backend trio]
"""
