#!/usr/bin/env bash
# Gangs through the scheduler and two real executors (sim:H100:2:80 each) whose trainer is a stand-in
# (fake_trainer.py): a job pinned to 4 devices (whet.min_gpus) is placed as ONE attempt of 4 ranks on
# both nodes; rank 0 starts first and the other ranks only after its rendezvous was relayed, each with
# the distributed object in its trainer config; a rank that exits non-zero stops the gang, which
# resumes from its checkpoint as the next generation, with an event naming the rank and node; each
# rank is metered; pause stops every rank; a SIGKILLed executor's lost lease fails the gang, which
# restarts when capacity is back and succeeds; a rank that connects to PostgreSQL is stopped by the
# sandbox (the gang's trainers reach each other on WHET_GANG_PORTS and nothing else); a rank 0 that
# never announces its rendezvous fails the attempt at the deadline; a LoRA job whose base does not fit
# one device is a gang by sizing alone, its ranks told to shard the base (ZeRO-3); a job pinned to 2
# devices, which one node holds, is a gang of 2 ranks on that node, one device each.
. "$(dirname "$0")/lib.sh" gang
here=$(cd "$(dirname "$0")" && pwd)
# The gang's ports: below the kernel's ephemeral range, where run.sh's PostgreSQL listens.
export WHET_GANG_PORTS=21000-21999
pg_port=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port)' "$WHET_TEST_DATABASE_URL")
"$WHET_BIN" model init --out "$work/tiny" >/dev/null
"$WHET_BIN" model register tiny "$work/tiny" >/dev/null
mkdir -p "$work/objects/files"
echo '{"messages":[]}' >"$work/objects/files/file-1"
echo '{"no-rendezvous":1}' >"$work/objects/files/file-2"
q "INSERT INTO tenants (id, name) VALUES ('t1', 'acme');
   INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key) VALUES
     ('file-1', 't1', 'fine-tune', 'train.jsonl', 16, 'x', 'files/file-1'),
     ('file-2', 't1', 'fine-tune', 'train.jsonl', 20, 'x', 'files/file-2')"
newjob() { # newjob ID FILE [DEVICES]: a job pinned to DEVICES (4) devices
  q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, whet)
     VALUES ('$1', 't1', 'tiny', 'tiny', '$2', '{\"type\":\"supervised\"}', 1, '{\"min_gpus\":${3:-4},\"max_gpus\":${3:-4}}');
     NOTIFY whet_jobs"; }
executor() { # executor N: starts executor N (sim:H100:2:80: two 80 GiB devices) and sets e$N to its pid
  "$WHET_BIN" executor --dc dc-a --pool dc-a --devices sim:H100:2:80 --work-dir "$work/e$1" \
    --trainer "$here/fake_trainer.py" >>"$work/e$1.log" 2>&1 &
  pids+=($!); eval "e$1=$!"
}
# ctl JOB ATTEMPT WORDS: tells every rank of the attempt (fake_trainer.py reads its job dir's ctl)
ctl() { for d in "$work"/e*/jobs/"$1-$2"-rank*; do echo "$3" >"$d/ctl"; done; }
rank_dir() { ls -d "$work"/e*/jobs/"$1-$2-rank$3"; }
# rdv JOB ATTEMPT: waits until the attempt's rendezvous is published, prints it
rdv() {
  for _ in $(seq 150); do r=$(q "SELECT rendezvous FROM job_attempts WHERE job_id = '$1' AND attempt = $2"); [ -n "$r" ] && break; sleep 0.1; done
  echo "$r"
}
in_range() { [[ "$1" =~ ^127\.0\.0\.1:21[0-9]{3}$ ]]; }
seen() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$(rank_dir "$1" "$2" "$3")/seen_config.json" "$4"; }

"$WHET_BIN" scheduler --lease-ms 3000 >"$work/sched.log" 2>&1 & pids+=($!)
executor 1; executor 2
check "two executors register" 'wait_for 15 "SELECT count(*) FROM nodes WHERE state = '"'"'ready'"'"' AND gpus = 2" 2'

# Placement: one attempt of 4 ranks, 2 on each node.
newjob ftjob-g file-1
check "one attempt of world size 4" 'wait_for 10 "SELECT world_size FROM job_attempts WHERE job_id = '"'"'ftjob-g'"'"'" 4'
check "ranks 0-1 on one node, 2-3 on the other" \
  '[ "$(q "SELECT count(DISTINCT node_id) || '"'"' '"'"'|| string_agg(rank::text, '"'"','"'"' ORDER BY rank) FROM gang_ranks WHERE job_id = '"'"'ftjob-g'"'"'")" = "2 0,1,2,3" ] &&
   [ "$(q "SELECT count(DISTINCT node_id) FROM gang_ranks WHERE job_id = '"'"'ftjob-g'"'"' AND rank IN (0, 1)")" = 1 ]'
check "the placement event names the gang" \
  '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'ftjob-g'"'"' AND message ~ '"'"'^Job placed on a gang of 4 ranks: node .* \(ranks 0-1\), node .* \(ranks 2-3\) in dc-a$'"'"'")" = 1 ]'
r1=$(rdv ftjob-g 1)
check "rank 0 listens on a port of the gang's range, its address published" 'in_range "$r1"'
check "every rank gets a START, rank 0's first, the others with the address" \
  'wait_for 10 "SELECT string_agg((manifest->'"'"'distributed'"'"'->>'"'"'rank'"'"') || '"'"'='"'"' || (manifest->'"'"'distributed'"'"'->>'"'"'rendezvous'"'"'), '"'"' '"'"' ORDER BY seq) FROM node_commands WHERE job_id = '"'"'ftjob-g'"'"' AND kind = '"'"'start'"'"' AND delivered_at IS NOT NULL" "0=127.0.0.1:0 1=$r1 2=$r1 3=$r1"'
for _ in $(seq 100); do [ -f "$(rank_dir ftjob-g 1 3 2>/dev/null)/seen_config.json" ] && break; sleep 0.1; done
check "rank 3's trainer config: its rank, the world, the generation, rank 0's address, no peer list" \
  '[ "$(seen ftjob-g 1 3 "sorted(c[\"distributed\"].items())")" = "[('"'"'generation'"'"', 1), ('"'"'host'"'"', '"'"'127.0.0.1'"'"'), ('"'"'rank'"'"', 3), ('"'"'rendezvous'"'"', '"'"'$r1'"'"'), ('"'"'timeout_s'"'"', 300), ('"'"'world_size'"'"', 4), ('"'"'zero'"'"', 0)]" ]'
check "every rank has the data and the model" '[ "$(seen ftjob-g 1 2 "bool(open(c[\"training_file\"]).read()) and __import__(\"os\").path.isdir(c[\"model\"])")" = True ]'
check "rank 0's checkpoint is reported" 'wait_for 10 "SELECT string_agg(step_number::text, '"'"','"'"') FROM checkpoints WHERE job_id = '"'"'ftjob-g'"'"'" 1'

# A rank exits non-zero: the whole gang stops and resumes from its checkpoint as generation 2.
failed_node=$(q "SELECT node_id FROM gang_ranks WHERE job_id = 'ftjob-g' AND attempt = 1 AND rank = 2")
echo "exit 3" >"$(rank_dir ftjob-g 1 2)/ctl"
check "the attempt fails as a gang" 'wait_for 15 "SELECT outcome FROM job_attempts WHERE job_id = '"'"'ftjob-g'"'"' AND attempt = 1" failed'
check "an event names the failed rank and its node" \
  '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'ftjob-g'"'"' AND message LIKE '"'"'Rank 2 of 4 on node '"$failed_node"' failed: rank 2: the trainer exited with status 3%resumes from its last checkpoint'"'"' AND data->>'"'"'rank'"'"' = '"'"'2'"'"'")" = 1 ]'
check "every rank of attempt 1 ends and is metered once (ranks x seconds)" \
  'wait_for 15 "SELECT count(*) FILTER (WHERE ended_at IS NOT NULL) || '"'"' '"'"' || (SELECT count(*) FROM usage_records u WHERE u.job_id = '"'"'ftjob-g'"'"' AND u.attempt = 1 AND u.device_seconds > 0) FROM gang_ranks WHERE job_id = '"'"'ftjob-g'"'"' AND attempt = 1" "4 4"'
check "generation 2 starts from the checkpoint of step 1" 'in_range "$(rdv ftjob-g 2)"'
for _ in $(seq 100); do [ -f "$(rank_dir ftjob-g 2 3 2>/dev/null)/seen_config.json" ] && break; sleep 0.1; done
check "each rank of generation 2 resumes from step 1" \
  '[ "$(seen ftjob-g 2 3 "(c[\"distributed\"][\"generation\"], open(c[\"resume_from\"] + \"/state.json\").read())")" = "(2, '"'"'{\"step\": 1, \"generation\": 1}'"'"')" ]'

# Pause: every rank stops; rank 0's checkpoint is the last.
q "UPDATE jobs SET desired = 'pause' WHERE id = 'ftjob-g'; NOTIFY whet_jobs"
check "pause reaches both nodes" 'wait_for 10 "SELECT count(DISTINCT node_id) FROM node_commands WHERE job_id = '"'"'ftjob-g'"'"' AND attempt = 2 AND kind = '"'"'stop'"'"'" 2'
check "the job pauses" 'wait_for 15 "SELECT status FROM jobs WHERE id = '"'"'ftjob-g'"'"'" paused'
# (each rank's executor reports its stop on its own: on a loaded machine the last can take tens of seconds)
check "every rank ends stopped" 'wait_for 45 "SELECT string_agg(outcome, '"'"','"'"' ORDER BY rank) FROM gang_ranks WHERE job_id = '"'"'ftjob-g'"'"' AND attempt = 2" stopped,stopped,stopped,stopped'

# Resumed, then one executor is killed: its lease runs out, the gang fails as lost and waits for
# capacity; the executor comes back (same node), the gang restarts and succeeds.
q "UPDATE jobs SET desired = 'run', status = 'queued' WHERE id = 'ftjob-g'; NOTIFY whet_jobs"
check "generation 3 runs" 'in_range "$(rdv ftjob-g 3)"'
for _ in $(seq 100); do [ "$(ls -d "$work"/e*/jobs/ftjob-g-3-rank* 2>/dev/null | wc -l)" = 4 ] && break; sleep 0.1; done
wait_for 10 "SELECT max(step_number) FROM checkpoints WHERE job_id = 'ftjob-g'" 4 || true
kill -9 "$e2"
e2_node=$(cat "$work/e2/node_id")
check "the lost node fails the gang" 'wait_for 20 "SELECT outcome FROM job_attempts WHERE job_id = '"'"'ftjob-g'"'"' AND attempt = 3" lost'
check "an event says which node was lost" \
  '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'ftjob-g'"'"' AND message LIKE '"'"'Rank _ of 4 on node '"$e2_node"' failed: Node '"$e2_node"' stopped answering%'"'"'")" = 1 ]'
check "the lost ranks are metered as lost" \
  '[ "$(q "SELECT count(*) FROM usage_records WHERE job_id = '"'"'ftjob-g'"'"' AND attempt = 3 AND lost")" = 2 ]'
check "the surviving node's ranks are cancelled" \
  'wait_for 15 "SELECT count(*) FROM gang_ranks WHERE job_id = '"'"'ftjob-g'"'"' AND attempt = 3 AND outcome = '"'"'cancelled'"'"'" 2'
check "the job waits for 4 devices" 'wait_for 10 "SELECT status || (wait_reason IS NOT NULL)::text FROM jobs WHERE id = '"'"'ftjob-g'"'"'" queuedtrue'
executor 2
for _ in $(seq 100); do [ "$(q "SELECT count(*) FROM job_attempts WHERE job_id = 'ftjob-g' AND attempt = 4")" = 1 ] && break; sleep 0.1; done
check "generation 4 runs when the node is back" 'in_range "$(rdv ftjob-g 4)"'
# (the restarted executor registers and fetches again: on a loaded machine its ranks start seconds later;
# a rank not yet started when told to finish would run on after the job has succeeded)
check "every rank of generation 4 starts" \
  'for _ in $(seq 600); do [ "$(ls "$work"/e*/jobs/ftjob-g-4-rank*/seen_config.json 2>/dev/null | wc -l)" = 4 ] && break; sleep 0.1; done;
   [ "$(ls "$work"/e*/jobs/ftjob-g-4-rank*/seen_config.json 2>/dev/null | wc -l)" = 4 ]'
ctl ftjob-g 4 finish
check "the job succeeds" 'wait_for 20 "SELECT status FROM jobs WHERE id = '"'"'ftjob-g'"'"'" succeeded'
check "checkpoints are unique and increasing over the generations" \
  '[ "$(q "SELECT string_agg(step_number::text, '"'"','"'"' ORDER BY created_at, step_number) FROM checkpoints WHERE job_id = '"'"'ftjob-g'"'"' AND object_prefix NOT LIKE '"'"'%/final'"'"'")" = "1,2,3,4,5" ]'
check "every rank of generation 4 succeeded" 'wait_for 10 "SELECT string_agg(outcome, '"'"','"'"' ORDER BY rank) FROM gang_ranks WHERE job_id = '"'"'ftjob-g'"'"' AND attempt = 4" succeeded,succeeded,succeeded,succeeded'
check "one usage record per rank and attempt" \
  '[ "$(q "SELECT count(*) || '"'"' '"'"' || count(DISTINCT (attempt, report_seq)) FROM usage_records WHERE job_id = '"'"'ftjob-g'"'"'")" = "16 16" ]'

# A job of 2 devices: one node holds it, so its 2 ranks run there, one device each, rank 1 joining rank 0
# on their own host.
newjob ftjob-p file-1 2
r=$(rdv ftjob-p 1)
check "a job of 2 devices is a gang of 2 ranks on one node, one device each" \
  '[ "$(q "SELECT a.world_size || '"'"' '"'"' || count(DISTINCT r.node_id) || '"'"' '"'"' || string_agg(r.gpu_mask::text, '"'"','"'"' ORDER BY r.rank)
           FROM job_attempts a JOIN gang_ranks r USING (job_id, attempt) WHERE a.job_id = '"'"'ftjob-p'"'"' GROUP BY a.world_size")" = "2 1 1,2" ]'
for _ in $(seq 100); do [ -f "$(rank_dir ftjob-p 1 1 2>/dev/null)/seen_config.json" ] && break; sleep 0.1; done
check "rank 1 is told rank 0's address on their node" \
  'in_range "$r" && [ "$(seen ftjob-p 1 1 "(c[\"distributed\"][\"world_size\"], c[\"distributed\"][\"rendezvous\"])")" = "(2, '"'"'$r'"'"')" ] &&
   [ "$(dirname "$(rank_dir ftjob-p 1 0)")" = "$(dirname "$(rank_dir ftjob-p 1 1)")" ]'
ctl ftjob-p 1 finish
check "the pair succeeds, each rank metered" \
  'wait_for 20 "SELECT status FROM jobs WHERE id = '"'"'ftjob-p'"'"'" succeeded &&
   wait_for 10 "SELECT count(*) FROM usage_records WHERE job_id = '"'"'ftjob-p'"'"' AND device_seconds > 0" 2'

# A rank that connects to PostgreSQL is stopped by the sandbox; the gang fails with it.
newjob ftjob-n file-1
check "a gang for the network check runs" 'in_range "$(rdv ftjob-n 1)"'
for _ in $(seq 100); do [ "$(ls "$work"/e*/jobs/ftjob-n-1-rank*/seen_config.json 2>/dev/null | wc -l)" = 4 ] && break; sleep 0.1; done
echo "connect 127.0.0.1 $pg_port" >"$(rank_dir ftjob-n 1 3)/ctl"
check "the rank is stopped at the connect and the gang fails" 'wait_for 15 "SELECT outcome FROM job_attempts WHERE job_id = '"'"'ftjob-n'"'"' AND attempt = 1" failed'
check "the event says what it tried" \
  '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'ftjob-n'"'"' AND message LIKE '"'"'Rank 3 of 4 on node % failed: rank 3: the trainer was killed by the sandbox: connect to 127.0.0.1:'"$pg_port"': not a port of the gang'"'"''"'"'s range%'"'"'")" = 1 ]'
check "it never reached PostgreSQL" '! grep -q "fake trainer: reached" "$(rank_dir ftjob-n 1 3)/trainer.log"'
q "UPDATE jobs SET desired = 'cancel' WHERE id = 'ftjob-n'; NOTIFY whet_jobs"
check "the job is cancelled" 'wait_for 15 "SELECT status FROM jobs WHERE id = '"'"'ftjob-n'"'"'" cancelled'

# A rank 0 that never announces its rendezvous fails the attempt at the deadline (brought forward).
newjob ftjob-q file-2
check "the silent gang's rank 0 runs alone" 'wait_for 15 "SELECT count(*) FROM gang_ranks WHERE job_id = '"'"'ftjob-q'"'"' AND started_at IS NOT NULL" 1'
q "UPDATE job_attempts SET rendezvous_deadline = 0 WHERE job_id = 'ftjob-q'; NOTIFY whet_jobs"
check "the attempt fails at the rendezvous deadline" 'wait_for 10 "SELECT outcome FROM job_attempts WHERE job_id = '"'"'ftjob-q'"'"' AND attempt = 1" failed'
check "its event says why" \
  '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'ftjob-q'"'"' AND message LIKE '"'"'Rank 0 of 4 on node % failed: rank 0 did not publish its rendezvous address within 600 s%'"'"'")" = 1 ]'
check "rank 0 is cancelled, ranks never started end with it" \
  'wait_for 10 "SELECT string_agg(outcome, '"'"','"'"' ORDER BY rank) FROM gang_ranks WHERE job_id = '"'"'ftjob-q'"'"' AND attempt = 1" cancelled,cancelled,cancelled,cancelled'
# (its executor may abandon rank 0 on a refused event before the gang's cancel arrives: it reports the end
# all the same, for the rank's row and its device-seconds)
check "rank 0's seconds are metered once" \
  'wait_for 10 "SELECT count(*) FROM usage_records WHERE job_id = '"'"'ftjob-q'"'"' AND attempt = 1 AND report_seq = 0" 1'
q "UPDATE jobs SET desired = 'cancel' WHERE id = 'ftjob-q'; NOTIFY whet_jobs"
check "the silent gang is cancelled" 'wait_for 15 "SELECT status FROM jobs WHERE id = '"'"'ftjob-q'"'"'" cancelled'

# A LoRA job whose base (45B parameters, 168 GiB of weights in f32) does not fit two 80 GiB devices:
# sizing makes it a gang of 3 without whet.min_gpus, more than one node holds, and the ranks shard the
# frozen base (ZeRO-3) as sizing assumed; the tiny base's LoRA gang above, made by min_gpus, stayed data
# parallel (zero 0). (Short sequences keep the activations small: the weights decide the gang.)
q "INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
     SELECT 'big', architecture, 45000000000, object_prefix, sha256,
       '{\"hidden_size\": 8192, \"intermediate_size\": 28672, \"num_hidden_layers\": 20, \"num_attention_heads\": 64,
         \"num_key_value_heads\": 8, \"vocab_size\": 32000}' FROM base_models WHERE id = 'tiny';
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, whet)
     VALUES ('ftjob-z', 't1', 'big', 'big', 'file-1', '{\"type\":\"supervised\"}', 1, '{\"max_seq_len\": 256}');
   NOTIFY whet_jobs"
check "sizing makes the big base's LoRA job a gang of 3" 'wait_for 15 "SELECT world_size FROM job_attempts WHERE job_id = '"'"'ftjob-z'"'"'" 3' ||
  q "SELECT status, wait_reason FROM jobs WHERE id = 'ftjob-z'" >&2
check "its ranks shard the base (zero 3)" \
  '[ "$(q "SELECT DISTINCT manifest->'"'"'distributed'"'"'->>'"'"'zero'"'"' FROM node_commands WHERE job_id = '"'"'ftjob-z'"'"' AND kind = '"'"'start'"'"'")" = 3 ]'
q "UPDATE jobs SET desired = 'cancel' WHERE id = 'ftjob-z'; NOTIFY whet_jobs"

[ $fails -eq 0 ] || tail -n 20 "$work"/*.log >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
