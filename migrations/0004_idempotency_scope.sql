-- 0004_idempotency_scope: Idempotency-Key for every state-changing POST, not only job create. A key
-- is scoped per tenant and route (method and path, as "POST /v1/uploads/upload_abc/parts"): the same
-- key sent to two routes names two independent requests.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE idempotency_keys ADD PRIMARY KEY (tenant_id, route, key);
