-- 0021_model_workers: the model workers (`whet serve`) the scheduler places like jobs, scaled from zero
-- on the first request and back to zero after an idle period (scheduler/service/serving.c).
--
-- A deployment is a base model served on a pool of nodes (nodes.pool; '' : any pool). The gateway
-- records demand on it (gateway/model_workers.c): last_request_at, at most once a second per base (and
-- the scheduler too while a replica reports requests running or waiting in a heartbeat), and
-- a NOTIFY whet_jobs when no worker of the base is ready, which starts a scheduler cycle at once. The
-- scheduler keeps `desired` replicas: none once no request came for WHET_SERVE_IDLE_S; one more (up to
-- WHET_SERVE_MAX_REPLICAS) while every ready replica has had requests waiting for a sequence slot for
-- a few seconds and none is starting (busy_at: when that was last seen); back to one once none was busy for WHET_SERVE_IDLE_S.
CREATE TABLE serving_deployments (
  base_model      text NOT NULL REFERENCES base_models(id) ON DELETE CASCADE,
  pool            text NOT NULL DEFAULT '',
  desired         integer NOT NULL DEFAULT 0 CHECK (desired >= 0),
  last_request_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
  busy_at         double precision,
  PRIMARY KEY (base_model, pool)
);

-- One row per replica: the scheduler inserts it 'starting' on a node and one of its devices (which no
-- job is placed on while the row lives); the executor runs `whet serve` there and reports its
-- HOST:PORT once it listens ('ready': the gateway hands requests to it); scale-down marks it
-- 'stopping' (the executor kills it); the executor's report of its end deletes the row, and so does
-- the loss of its node.
CREATE TABLE model_workers (
  id              text PRIMARY KEY,
  base_model      text NOT NULL,
  pool            text NOT NULL,
  node_id         text NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  device_index    integer NOT NULL CHECK (device_index >= 0),
  address         text,
  state           text NOT NULL DEFAULT 'starting' CHECK (state IN ('starting', 'ready', 'stopping')),
  started_at      double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
  ready_at        double precision,
  requests_waiting integer NOT NULL DEFAULT 0, -- for a sequence slot, as the executor last read it
  queued_since    double precision,            -- since when it has had requests waiting (NULL: none)
  FOREIGN KEY (base_model, pool) REFERENCES serving_deployments(base_model, pool) ON DELETE CASCADE
);
CREATE UNIQUE INDEX model_workers_device ON model_workers(node_id, device_index);
CREATE INDEX model_workers_base ON model_workers(base_model) WHERE state = 'ready';

-- No tenant's data: the gateway's role reads the ready workers and records demand.
GRANT SELECT ON model_workers TO whet_app;
GRANT SELECT, INSERT, UPDATE ON serving_deployments TO whet_app;
