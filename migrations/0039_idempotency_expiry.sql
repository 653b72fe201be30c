-- 0039_idempotency_expiry: Idempotency-Key rows were kept for ever: every key a client ever sent (most are
-- a fresh UUID a request) stayed in idempotency_keys, and a reservation whose gateway died before it
-- stored the answer answered 409 for ever. A key now lives 24 hours, as Stripe's do: the gateway ignores an
-- older row, a reservation replaces it (whet_idem_reserve), and the scheduler's leader deletes expired rows
-- in batches (scheduler/service/retention.c) by the index below.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

CREATE FUNCTION whet_idempotency_ttl_s() RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 86400';

-- Reserves a key in the request's transaction: an expired row of the key goes first; a live one makes the
-- INSERT fail on the primary key (23505), which the gateway reads as a lost race, as before.
CREATE FUNCTION whet_idem_reserve(p_tenant text, p_route text, p_key text, p_sha256 text) RETURNS void
  LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM idempotency_keys WHERE tenant_id = p_tenant AND route = p_route AND key = p_key
    AND created_at <= whet_now() - whet_idempotency_ttl_s();
  INSERT INTO idempotency_keys (tenant_id, route, key, request_sha256, status, response)
    VALUES (p_tenant, p_route, p_key, p_sha256, 0, '');
END
$$;
