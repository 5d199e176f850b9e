"""UCP shopping (dev.ucp.shopping.*) for one company: checkout, fulfillment, discount, buyer consent,
orders and the order-webhook outbox.

Pure core (no I/O, time passed in): :mod:`.status`, :mod:`.messages`, :mod:`.totals`,
:mod:`.fulfillment`, :mod:`.discounts`, :mod:`.checkout`, :mod:`.validation`, :mod:`.orders`.
Shell: :mod:`.repo` (asyncpg), :mod:`.service` (one transaction per operation), :mod:`.idempotency`,
:mod:`.webhooks` (outbox delivery worker), :mod:`.web` (REST binding, ``setup(app)``).
"""

__all__: list[str] = []
