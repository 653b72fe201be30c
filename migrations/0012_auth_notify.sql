-- 0012_auth_notify: every gateway replica caches verified credentials for a few seconds; a change to
-- an API key (revoked, removed) or a tenant (disabled, its limits changed, removed), however made
-- (operator API of any replica, tenant API, SQL), notifies the channel whet_auth at commit, and each
-- replica's listener (gateway/replica.c) empties its caches. Per statement: a bulk change sends one
-- notification (PostgreSQL folds identical ones of a transaction into one).
CREATE FUNCTION whet_auth_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('whet_auth', TG_TABLE_NAME);
  RETURN NULL;
END
$$;
CREATE TRIGGER api_keys_auth_notify AFTER UPDATE OR DELETE ON api_keys FOR EACH STATEMENT
  EXECUTE FUNCTION whet_auth_notify();
CREATE TRIGGER tenants_auth_notify AFTER UPDATE OR DELETE ON tenants FOR EACH STATEMENT
  EXECUTE FUNCTION whet_auth_notify();
