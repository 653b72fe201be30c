-- What placement reads of a node (its data center, devices, resources, address, state) changes rarely: a
-- registration, a loss, new devices. Its heartbeats (5,000 a second at 10k nodes) change only last_heartbeat.
-- Reading every ready node each cycle took ~150 ms of PostgreSQL a cycle at 10k nodes under load
-- (tests/bench/scale), so the leader keeps the nodes between cycles (scheduler/service/nodes.c) and reads
-- again only those named here since its previous read, as running_changes (0020) does for the attempts:
-- by transaction id, rows older than its previous read's snapshot xmin deleted.
CREATE TABLE node_changes (
  xid     xid8 NOT NULL DEFAULT pg_current_xact_id(),
  node_id text NOT NULL
);
CREATE INDEX node_changes_xid ON node_changes (xid);

CREATE FUNCTION whet_node_changed() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  -- Both ids of an update: one that renamed the node leaves the old id to drop.
  IF TG_OP <> 'INSERT' THEN
    INSERT INTO node_changes (node_id) VALUES (OLD.id);
  END IF;
  IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.id <> OLD.id) THEN
    INSERT INTO node_changes (node_id) VALUES (NEW.id);
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER nodes_placement_written AFTER INSERT OR DELETE ON nodes FOR EACH ROW
  EXECUTE FUNCTION whet_node_changed();
-- The columns the cycle reads (scheduler/service/nodes.c, NODE_COLUMNS), only when one changed: a
-- registration again sets them all to what they were.
CREATE TRIGGER nodes_placement_changed AFTER UPDATE OF id, dc, device_type, devices, gpus, cpu_milli, memory_mib,
  address, state ON nodes FOR EACH ROW
  WHEN ((OLD.id, OLD.dc, OLD.device_type, OLD.devices, OLD.gpus, OLD.cpu_milli, OLD.memory_mib, OLD.address, OLD.state)
        IS DISTINCT FROM
        (NEW.id, NEW.dc, NEW.device_type, NEW.devices, NEW.gpus, NEW.cpu_milli, NEW.memory_mib, NEW.address, NEW.state))
  EXECUTE FUNCTION whet_node_changed();
