-- 0013_gateway_replicas: the gateway replicas alive, each marking itself every second (gateway/
-- replica.c), so that each enforces its share (1/N) of a tenant's rate limits; rows a minute old are
-- replicas that died and are forgotten.
CREATE TABLE gateway_replicas (
  id            text PRIMARY KEY,
  seen_at       timestamptz NOT NULL DEFAULT now()
);
