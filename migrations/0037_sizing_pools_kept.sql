-- 0037_sizing_pools_kept: whet_sizing_pools (0022), read by every job create's estimate, grouped all the
-- fleet's ready nodes on each call (and parsed each node's devices JSON): 15 ms a call at 10,000 nodes in
-- psql, O(fleet) on the request path. Now the pools are kept in sizing_pools by a trigger on nodes that
-- fires only when a column that places a node in a pool is written (a registration, a node declared
-- lost, its devices): a heartbeat's UPDATE names last_heartbeat alone, so it never fires it. Reading is
-- O(pools). A node that changes pools updates its two rows in key order, so two such changes at once
-- cannot deadlock; a registration that changes nothing (the usual one) locks no row of sizing_pools.
CREATE TABLE sizing_pools (
  dc          text NOT NULL,
  device_type text NOT NULL,
  device_mib  integer NOT NULL,  -- the first device's memory (0: not reported)
  nodes       integer NOT NULL,  -- ready nodes; a row at 0 stays (deleting it would race the next node)
  devices     bigint NOT NULL,
  PRIMARY KEY (dc, device_type, device_mib)
);

CREATE FUNCTION whet_sizing_pool_add(p_dc text, p_type text, p_mib integer, p_nodes integer, p_devices bigint)
  RETURNS void LANGUAGE sql AS $$
  INSERT INTO sizing_pools AS p VALUES (p_dc, p_type, p_mib, p_nodes, p_devices)
  ON CONFLICT (dc, device_type, device_mib)
  DO UPDATE SET nodes = p.nodes + EXCLUDED.nodes, devices = p.devices + EXCLUDED.devices
$$;

CREATE FUNCTION whet_sizing_pools_apply() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  was boolean := TG_OP <> 'INSERT' AND OLD.state = 'ready';
  now_in boolean := TG_OP <> 'DELETE' AND NEW.state = 'ready';
  o_mib integer;
  n_mib integer;
BEGIN
  IF was THEN o_mib := coalesce((OLD.devices -> 0 ->> 'memory_mib')::int, 0); END IF;
  IF now_in THEN n_mib := coalesce((NEW.devices -> 0 ->> 'memory_mib')::int, 0); END IF;
  IF was AND now_in AND (OLD.dc, OLD.device_type, o_mib) = (NEW.dc, NEW.device_type, n_mib) THEN
    IF NEW.gpus <> OLD.gpus THEN
      PERFORM whet_sizing_pool_add(NEW.dc, NEW.device_type, n_mib, 0, NEW.gpus - OLD.gpus);
    END IF;
  ELSIF was AND now_in AND (NEW.dc, NEW.device_type, n_mib) < (OLD.dc, OLD.device_type, o_mib) THEN
    PERFORM whet_sizing_pool_add(NEW.dc, NEW.device_type, n_mib, 1, NEW.gpus);
    PERFORM whet_sizing_pool_add(OLD.dc, OLD.device_type, o_mib, -1, -OLD.gpus);
  ELSE
    IF was THEN PERFORM whet_sizing_pool_add(OLD.dc, OLD.device_type, o_mib, -1, -OLD.gpus); END IF;
    IF now_in THEN PERFORM whet_sizing_pool_add(NEW.dc, NEW.device_type, n_mib, 1, NEW.gpus); END IF;
  END IF;
  RETURN NULL;
END
$$;

-- The trigger first: its lock on nodes holds off every change until the rows below are counted.
CREATE TRIGGER nodes_sizing_pools AFTER INSERT OR DELETE OR UPDATE OF state, dc, device_type, devices, gpus
  ON nodes FOR EACH ROW EXECUTE FUNCTION whet_sizing_pools_apply();
INSERT INTO sizing_pools
  SELECT dc, device_type, coalesce((devices -> 0 ->> 'memory_mib')::int, 0), count(*), sum(gpus)
  FROM nodes WHERE state = 'ready' GROUP BY 1, 2, 3;

CREATE OR REPLACE FUNCTION whet_sizing_pools() RETURNS jsonb LANGUAGE sql STABLE SECURITY DEFINER
  SET search_path = public AS $$
  SELECT coalesce(jsonb_agg(jsonb_build_object('dc', dc, 'device_type', device_type, 'device_mib', device_mib,
                                               'devices', devices) ORDER BY dc, device_type, device_mib), '[]')
  FROM sizing_pools WHERE nodes > 0
$$;
