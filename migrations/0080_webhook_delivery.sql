-- 0080: order-webhook delivery that keeps up (ucp_gateway.commerce.webhook_queue).
--
-- receiver: who the event goes to (the caller's platform profile URL; '' for rows queued before
-- this migration, until their first attempt sets it). The worker leases the oldest due events of
-- every receiver in turn, a bounded number per receiver, so a slow or dead receiver only delays
-- its own events; the index walks the receivers that have something due.
-- enqueued_at: when the event was queued (the age of the oldest undelivered event, for metrics).
-- dead_at: the dead-letter state of an outbox row: its retry budget is spent or its target was
-- refused; no longer queued, kept for staff to see (and requeue) until retention removes it.
ALTER TABLE webhook_queue ADD COLUMN receiver text NOT NULL DEFAULT '';
ALTER TABLE webhook_queue ADD COLUMN enqueued_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX webhook_queue_receiver_due ON webhook_queue (receiver, next_attempt_at);
ALTER TABLE webhook_outbox ADD COLUMN dead_at timestamptz;
CREATE INDEX webhook_outbox_dead ON webhook_outbox (company_id, dead_at) WHERE dead_at IS NOT NULL;
