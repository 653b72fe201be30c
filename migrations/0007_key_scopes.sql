-- 0007_key_scopes: API keys limited to some routes, and keys that expire. `all` is every route (the
-- keys made before this migration); `read` every GET; `files` files and uploads; `jobs` fine-tuning
-- jobs, their checkpoints and metrics, graders and the model list; `inference` inference and the
-- model list (gateway/scopes.h). expires_at (Unix seconds, NULL: never) is checked on every request.
ALTER TABLE api_keys
  ADD COLUMN scopes text[] NOT NULL DEFAULT '{all}'
    CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['all', 'read', 'files', 'jobs', 'inference']),
  ADD COLUMN expires_at bigint,
  ADD COLUMN name text,
  ADD COLUMN monthly_limit numeric CHECK (monthly_limit >= 0);  -- the key's own budget (migration 0009)

-- A tenant manages its own keys through the tenant role, which may read api_keys (authentication looks
-- keys up before the tenant is known) but not write them: these functions write only rows of the
-- tenant the session is scoped to (whet.tenant_id), whatever they are passed.
CREATE FUNCTION whet_tenant_key_create(p_id text, p_hash bytea, p_prefix text, p_scopes text[], p_expires bigint,
                                       p_name text, p_monthly_limit numeric)
  RETURNS TABLE (id text, tenant_id text, key_prefix text, created_at bigint, revoked_at bigint, scopes text[],
                 expires_at bigint, name text, monthly_limit numeric)
  LANGUAGE sql SECURITY DEFINER SET search_path = public AS $$
  INSERT INTO api_keys (id, tenant_id, key_hash, key_prefix, scopes, expires_at, name, monthly_limit)
  SELECT p_id, whet_current_tenant(), p_hash, p_prefix, p_scopes, p_expires, p_name, p_monthly_limit
  WHERE whet_current_tenant() IS NOT NULL
  RETURNING id, tenant_id, key_prefix, created_at, revoked_at, scopes, expires_at, name, monthly_limit
$$;
CREATE FUNCTION whet_tenant_key_revoke(p_id text)
  RETURNS TABLE (id text, tenant_id text, key_prefix text, created_at bigint, revoked_at bigint, scopes text[],
                 expires_at bigint, name text, monthly_limit numeric)
  LANGUAGE sql SECURITY DEFINER SET search_path = public AS $$
  UPDATE api_keys k SET revoked_at = coalesce(k.revoked_at, whet_now())
  WHERE k.id = p_id AND k.tenant_id = whet_current_tenant()
  RETURNING k.id, k.tenant_id, k.key_prefix, k.created_at, k.revoked_at, k.scopes, k.expires_at, k.name, k.monthly_limit
$$;
REVOKE ALL ON FUNCTION whet_tenant_key_create, whet_tenant_key_revoke FROM PUBLIC;
GRANT EXECUTE ON FUNCTION whet_tenant_key_create, whet_tenant_key_revoke TO whet_app;
