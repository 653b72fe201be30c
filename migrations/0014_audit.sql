-- 0014_audit: the append-only audit log of operator and security-relevant actions (gateway/audit.c
-- writes it, GET /admin/v1/audit reads it): tenants, API keys, quotas, prices and budgets changed,
-- authentication failures past a threshold, checkpoint files downloaded. Rows are only ever inserted:
-- the application role may insert (tenant requests record their own actions) but never read, update
-- or delete, and a trigger refuses UPDATE, DELETE and TRUNCATE for every role, the owner included,
-- so a compromised gateway cannot rewrite history (dropping the trigger takes the migrating role).
CREATE TABLE audit_log (
  id          bigserial PRIMARY KEY,
  at          bigint NOT NULL DEFAULT whet_now(),
  actor       text NOT NULL,          -- "operator", an API key's id, "tenant-token:<name>" or "anonymous"
  action      text NOT NULL,          -- "tenant.create", "api_key.revoke", "auth.failures", ...
  tenant_id   text,                   -- the tenant acted on or acting (NULL: none known)
  target      text,                   -- the object acted on (a tenant, key, price book, file, address)
  request_id  text NOT NULL,
  detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);
CREATE INDEX audit_log_action ON audit_log (action, id);

CREATE FUNCTION whet_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
  FOR EACH ROW EXECUTE FUNCTION whet_audit_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
  FOR EACH STATEMENT EXECUTE FUNCTION whet_audit_append_only();

REVOKE ALL ON audit_log FROM whet_app;
GRANT INSERT ON audit_log TO whet_app;
GRANT USAGE ON SEQUENCE audit_log_id_seq TO whet_app;
