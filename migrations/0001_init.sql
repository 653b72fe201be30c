-- 0001_init: the control plane's tables. Every tenant-owned row carries tenant_id; the gateway runs its
-- queries as the role whet_app, for which row-level security restricts every such table to the tenant
-- named by the session setting whet.tenant_id (the second wall behind the WHERE clauses).
-- Public objects use OpenAI-style text ids (file-…, ftjob-…); `seq` gives each listable table a stable
-- order for cursor pagination. Times are Unix seconds, as the API returns them.

-- Roles belong to the whole cluster: several databases of one cluster may be migrated at once (the
-- test suite does), and the loser of that race sees a unique violation rather than duplicate_object.
DO $$ BEGIN
  CREATE ROLE whet_app NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$;
DO $$ BEGIN
  GRANT whet_app TO CURRENT_USER;
EXCEPTION WHEN OTHERS THEN
  IF NOT pg_has_role(current_user, 'whet_app', 'MEMBER') THEN RAISE; END IF;
END $$;

CREATE FUNCTION whet_now() RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT extract(epoch FROM now())::bigint $$;
CREATE FUNCTION whet_current_tenant() RETURNS text LANGUAGE sql STABLE AS
  $$ SELECT nullif(current_setting('whet.tenant_id', true), '') $$;

CREATE TABLE tenants (
  id            text PRIMARY KEY,
  name          text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
  weight        double precision NOT NULL DEFAULT 1 CHECK (weight > 0),
  rate_per_s    double precision NOT NULL DEFAULT 50 CHECK (rate_per_s > 0),
  rate_burst    integer NOT NULL DEFAULT 100 CHECK (rate_burst > 0),
  max_active_jobs integer NOT NULL DEFAULT 16 CHECK (max_active_jobs >= 0),
  disabled      boolean NOT NULL DEFAULT false,
  created_at    bigint NOT NULL DEFAULT whet_now()
);

CREATE TABLE api_keys (
  id            text PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  key_hash      bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),  -- SHA-256 of the key
  key_prefix    text NOT NULL,                                       -- first characters, for display
  created_at    bigint NOT NULL DEFAULT whet_now(),
  revoked_at    bigint
);
CREATE INDEX api_keys_tenant ON api_keys(tenant_id);

-- Guaranteed GPUs per tenant and GPU type; beyond them a tenant borrows idle capacity by weight.
CREATE TABLE quotas (
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  gpu_type      text NOT NULL,
  gpus          integer NOT NULL CHECK (gpus >= 0),
  PRIMARY KEY (tenant_id, gpu_type)
);

CREATE TABLE base_models (
  id            text PRIMARY KEY,               -- the name tenants use as `model`
  architecture  text NOT NULL,
  parameters    bigint NOT NULL CHECK (parameters > 0),
  object_prefix text NOT NULL,                  -- where the HF model dir lives in the object store
  sha256        text NOT NULL,                  -- of the manifest, to verify cached copies
  config        jsonb NOT NULL,
  created_at    bigint NOT NULL DEFAULT whet_now()
);

CREATE TABLE files (
  seq           bigserial UNIQUE,
  id            text PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  purpose       text NOT NULL,
  filename      text NOT NULL,
  bytes         bigint NOT NULL CHECK (bytes >= 0),
  sha256        text NOT NULL,
  object_key    text NOT NULL,
  status        text NOT NULL DEFAULT 'processed',
  format        text,                            -- sft | dpo | rft for fine-tune files
  line_count    integer,
  created_at    bigint NOT NULL DEFAULT whet_now(),
  expires_at    bigint
);
CREATE INDEX files_tenant ON files(tenant_id, seq);

CREATE TABLE uploads (
  seq           bigserial UNIQUE,
  id            text PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  filename      text NOT NULL,
  purpose       text NOT NULL,
  mime_type     text NOT NULL,
  bytes         bigint NOT NULL CHECK (bytes >= 0),
  status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'completed', 'cancelled', 'expired')),
  file_id       text REFERENCES files(id) ON DELETE SET NULL,
  created_at    bigint NOT NULL DEFAULT whet_now(),
  expires_at    bigint NOT NULL
);

CREATE TABLE upload_parts (
  seq           bigserial UNIQUE,
  id            text PRIMARY KEY,
  upload_id     text NOT NULL REFERENCES uploads(id) ON DELETE CASCADE,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  bytes         bigint NOT NULL CHECK (bytes >= 0),
  object_key    text NOT NULL,
  created_at    bigint NOT NULL DEFAULT whet_now()
);
CREATE INDEX upload_parts_upload ON upload_parts(upload_id);

CREATE TABLE jobs (
  seq           bigserial UNIQUE,
  id            text PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  model         text NOT NULL,                   -- as the tenant named it (base model or ft:… model)
  base_model    text NOT NULL REFERENCES base_models(id),
  init_checkpoint text,                          -- checkpoint id when continuing from a fine-tuned model
  training_file text NOT NULL REFERENCES files(id),
  validation_file text REFERENCES files(id),
  method        jsonb NOT NULL,                  -- OpenAI's method object, hyperparameters resolved
  suffix        text,
  seed          integer NOT NULL,
  metadata      jsonb,
  whet          jsonb NOT NULL DEFAULT '{}',     -- the whet extension object (priority, lora, gpu types, …)
  status        text NOT NULL DEFAULT 'queued' CHECK (status IN
                  ('validating_files', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'paused')),
  error         jsonb,
  fine_tuned_model text,
  trained_tokens bigint,
  estimated_finish bigint,
  result_files  jsonb NOT NULL DEFAULT '[]',
  created_at    bigint NOT NULL DEFAULT whet_now(),
  finished_at   bigint,
  -- scheduling state, internal
  priority      integer NOT NULL DEFAULT 0,
  desired       text NOT NULL DEFAULT 'run' CHECK (desired IN ('run', 'pause', 'cancel')),
  attempt       integer NOT NULL DEFAULT 0,
  node_id       text,
  wait_reason   text,
  last_step     integer NOT NULL DEFAULT 0,
  total_steps   integer
);
CREATE INDEX jobs_tenant ON jobs(tenant_id, seq);
CREATE INDEX jobs_active ON jobs(status) WHERE status IN ('queued', 'running', 'paused');
CREATE INDEX jobs_metadata ON jobs USING gin (metadata jsonb_path_ops);

CREATE TABLE job_events (
  seq           bigserial UNIQUE,
  id            text PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  job_id        text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  level         text NOT NULL DEFAULT 'info' CHECK (level IN ('info', 'warn', 'error')),
  type          text NOT NULL DEFAULT 'message' CHECK (type IN ('message', 'metrics')),
  message       text NOT NULL,
  data          jsonb,
  created_at    bigint NOT NULL DEFAULT whet_now()
);
CREATE INDEX job_events_job ON job_events(job_id, seq);

CREATE TABLE checkpoints (
  seq           bigserial UNIQUE,
  id            text PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  job_id        text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step_number   integer NOT NULL,
  fine_tuned_model_checkpoint text NOT NULL,
  metrics       jsonb NOT NULL DEFAULT '{}',
  object_prefix text NOT NULL,
  bytes         bigint NOT NULL DEFAULT 0,
  created_at    bigint NOT NULL DEFAULT whet_now(),
  UNIQUE (job_id, step_number)
);

CREATE TABLE usage_records (
  seq           bigserial PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  job_id        text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt       integer NOT NULL,
  report_seq    integer NOT NULL,               -- idempotency: (job, attempt, report_seq) is recorded once
  device_type   text NOT NULL,
  device_seconds double precision NOT NULL DEFAULT 0,
  trained_tokens bigint NOT NULL DEFAULT 0,
  rollout_tokens bigint NOT NULL DEFAULT 0,
  storage_byte_hours double precision NOT NULL DEFAULT 0,
  lost          boolean NOT NULL DEFAULT false,  -- seconds of an attempt that died with its node
  created_at    bigint NOT NULL DEFAULT whet_now(),
  UNIQUE (job_id, attempt, report_seq)
);
CREATE INDEX usage_tenant ON usage_records(tenant_id, created_at);

-- A retried create (the OpenAI SDKs retry POSTs) with the same Idempotency-Key returns the first answer.
CREATE TABLE idempotency_keys (
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  key           text NOT NULL,
  route         text NOT NULL,
  request_sha256 text NOT NULL,
  status        integer NOT NULL,
  response      text NOT NULL,
  created_at    bigint NOT NULL DEFAULT whet_now(),
  PRIMARY KEY (tenant_id, key)
);

-- Row-level security: whet_app sees only the rows of the tenant in whet.tenant_id. Table owners (the
-- migrating user, the scheduler) bypass it.
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['files', 'uploads', 'upload_parts', 'jobs', 'job_events', 'checkpoints',
                           'usage_records', 'idempotency_keys', 'quotas']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I TO whet_app USING (tenant_id = whet_current_tenant()) '
                   'WITH CHECK (tenant_id = whet_current_tenant())', t);
  END LOOP;
END $$;

GRANT SELECT ON tenants, api_keys, base_models TO whet_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON files, uploads, upload_parts, jobs, job_events, checkpoints,
  idempotency_keys TO whet_app;
GRANT SELECT ON usage_records, quotas TO whet_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO whet_app;
