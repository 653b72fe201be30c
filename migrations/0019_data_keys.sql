-- 0019_data_keys: encryption at rest. Each tenant has a data key (AES-256) that seals its datasets,
-- checkpoints and adapters in the object store; it is stored here only wrapped (AES-256-GCM) under an
-- operator key from WHET_DATA_KEY_FILE, named by operator_key_id so that a rotated keyring still
-- unwraps the rows of older keys until they are rewrapped (common/datakey.h, common/pg/data_keys.c).
-- key_id is the data key's generation, written into every object it seals. Deleting a tenant deletes
-- its keys, and with them every sealed object becomes unreadable.
--
-- The application role (whet_app) gets no grant: only the control plane's owner connection reads it.
CREATE TABLE tenant_data_keys (
  tenant_id        text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  key_id           integer NOT NULL CHECK (key_id > 0),
  operator_key_id  text NOT NULL CHECK (operator_key_id ~ '^[A-Za-z0-9_.-]{1,32}$'),
  wrapped          bytea NOT NULL CHECK (length(wrapped) = 60),
  created_at       bigint NOT NULL DEFAULT whet_now(),
  rewrapped_at     bigint,
  PRIMARY KEY (tenant_id, key_id)
);
CREATE INDEX tenant_data_keys_operator ON tenant_data_keys(operator_key_id);
