-- 0017_training_sessions: training sessions (POST /v1/training_sessions, gateway/training_sessions.c): a
-- tenant's own LoRA adapter trained call by call on the model worker of its base. The row is who owns
-- the session (a call on another tenant's or a deleted session is a 404); the adapter itself lives on
-- the worker until it is deleted or expires, and its saves in the object store.
CREATE TABLE training_sessions (
  id              text PRIMARY KEY,
  tenant_id       text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  base_model      text NOT NULL,
  lora            jsonb NOT NULL DEFAULT '{}',  -- as the create asked: {r, alpha, target_modules, seed}
  init_checkpoint text,                         -- the object-store prefix of the adapter it started from
  created_at      bigint NOT NULL DEFAULT whet_now(),
  deleted_at      bigint
);
CREATE INDEX training_sessions_tenant ON training_sessions (tenant_id, created_at);
ALTER TABLE training_sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON training_sessions TO whet_app USING (tenant_id = whet_current_tenant())
  WITH CHECK (tenant_id = whet_current_tenant());
GRANT SELECT, INSERT, UPDATE ON training_sessions TO whet_app;
