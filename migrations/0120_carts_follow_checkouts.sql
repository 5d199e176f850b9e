-- 0120: a cart follows the checkout made from it, and expired carts are swept.
--
-- UCP cart "Cart-to-Checkout Conversion": cart and checkout SHOULD stay linked, checkout quantity
-- changes and removals SHOULD be reflected back to the cart, and after completion the business MAY
-- clear the cart. Here, for the checkout linked to a cart (cart_checkouts):
--   * every change of the checkout's line items (update_checkout: items added, removed, quantities)
--     becomes the cart's line items (its context, buyer and codes stay the cart's own);
--   * the checkout's completion deletes the cart (later cart operations answer not_found);
--   * a canceled or expired checkout leaves the cart as it is (the buyer may come back to it).
-- A trigger does it, so every writer of checkout_sessions (update, the completing statement that the
-- verb runtime sends with its audit row) is covered without the checkout code knowing about carts.
-- Its WHEN clause costs a checkout without a cart no function call unless its items or status change.
--
-- cart_checkouts rows now go with their cart (a foreign key, ON DELETE CASCADE): cancel_cart left
-- the link behind before. The retention sweeper deletes expired carts (ucp_gateway.retention): the
-- scan role sees their company_id and expires_at only, as for the other rules (migration 0090).

-- links whose cart is gone (canceled carts) would refuse the foreign key; the owner clears them with
-- row-level security lifted for this statement only (FORCE is back before the transaction ends)
ALTER TABLE cart_checkouts NO FORCE ROW LEVEL SECURITY;
ALTER TABLE carts NO FORCE ROW LEVEL SECURITY;
DELETE FROM cart_checkouts l WHERE NOT EXISTS (SELECT 1 FROM carts c WHERE c.company_id = l.company_id AND c.id = l.cart_id);
ALTER TABLE cart_checkouts ADD FOREIGN KEY (company_id, cart_id) REFERENCES carts (company_id, id) ON DELETE CASCADE;
ALTER TABLE cart_checkouts FORCE ROW LEVEL SECURITY;
ALTER TABLE carts FORCE ROW LEVEL SECURITY;
CREATE INDEX cart_checkouts_checkout ON cart_checkouts (company_id, checkout_id);

CREATE FUNCTION cart_follow_checkout() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'completed' THEN
        DELETE FROM carts c USING cart_checkouts l
        WHERE l.company_id = NEW.company_id AND l.checkout_id = NEW.id
          AND c.company_id = l.company_id AND c.id = l.cart_id;
    ELSIF NEW.status <> 'canceled' THEN
        UPDATE carts c SET state = jsonb_set(c.state, '{line_items}', NEW.state -> 'line_items'),
                           updated_at = NEW.updated_at
        FROM cart_checkouts l
        WHERE l.company_id = NEW.company_id AND l.checkout_id = NEW.id
          AND c.company_id = l.company_id AND c.id = l.cart_id
          AND c.state -> 'line_items' IS DISTINCT FROM NEW.state -> 'line_items';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER cart_follow_checkout AFTER UPDATE OF state, status ON checkout_sessions
    FOR EACH ROW WHEN ((NEW.status = 'completed' AND OLD.status <> 'completed')
                       OR (NEW.state -> 'line_items') IS DISTINCT FROM (OLD.state -> 'line_items'))
    EXECUTE FUNCTION cart_follow_checkout();

-- retention: expired carts (the API answers not_found after expires_at)
GRANT SELECT (company_id, expires_at) ON carts TO ucp_scan;
CREATE POLICY retention_scan ON carts FOR SELECT TO ucp_scan
    USING (current_setting('app.platform_scan', true) = 'retention');
