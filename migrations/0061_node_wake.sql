-- 0061_node_wake: most heartbeats have nothing for the database to do (the node's stored lease is not yet due
-- for a write, its jobs' progress is not news, nothing waits for it), yet each ran heartbeats.c's statement:
-- ~620 us of PostgreSQL CPU a heartbeat with a quiet fleet of 2,000 nodes (tests/bench/scale). The leader now
-- answers such a heartbeat from what the node's previous statement told it (heartbeat_quiet.c), which it may do
-- only while nothing was given to the node since: a command to deliver (node_commands) or a model worker to
-- run (model_workers, whose node's heartbeat then takes the serving step). Every statement that gives a node
-- either says so on the channel whet_node_wake, the nodes' ids separated by spaces ('*' when they would not fit
-- in a NOTIFY's payload: every node, then). A NOTIFY is delivered at commit, so the leader hears of the row
-- only once a statement could read it.
CREATE FUNCTION whet_node_wake() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_nodes text;
BEGIN
  SELECT string_agg(DISTINCT node_id, ' ') INTO v_nodes FROM given;
  IF v_nodes IS NOT NULL THEN
    PERFORM pg_notify('whet_node_wake', CASE WHEN octet_length(v_nodes) < 7900 THEN v_nodes ELSE '*' END);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER node_commands_wake AFTER INSERT ON node_commands REFERENCING NEW TABLE AS given
  FOR EACH STATEMENT EXECUTE FUNCTION whet_node_wake();
CREATE TRIGGER model_workers_wake AFTER INSERT ON model_workers REFERENCING NEW TABLE AS given
  FOR EACH STATEMENT EXECUTE FUNCTION whet_node_wake();
