"""Platform access: who a request's principal is and what its access level may do (docs/access.md).

Proof checks each live in their own module and end in the one principal the rest of the gateway
consumes (``httpsig.web.AgentPrincipal`` under ``request[REQ_PRINCIPAL]``), plugged into the
signature layer as ``httpsig.web.PROOF_VERIFIERS``. The levels and the access table are
:mod:`ucp_gateway.levels`.
"""
