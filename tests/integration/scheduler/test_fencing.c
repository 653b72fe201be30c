/* test_fencing.c - the scheduler's fence against stale attempts (scheduler/service/handlers.c): its
 * handlers called as the gRPC server calls them, on a database of their own (tests/run.sh's PostgreSQL,
 * migrated by `whet migrate`). Job J's attempt 1 ran on node-a in dc-a, which was declared lost; attempt
 * 2 runs on node-b in dc-b. node-a comes back and reports attempt 1: its events, checkpoints, end and
 * heartbeat progress change nothing and are answered FAILED_PRECONDITION (the heartbeat: register
 * again), while attempt 2's apply. A late success of a lost attempt is refused once the newer attempt
 * has recorded a checkpoint, taken (newer attempt cancelled, then fenced) when it has not, and a retry
 * of a taken one is answered OK. A success records its final model's checkpoint row with its end. A
 * FinishJob does not wait for the key checks of rows being inserted for its job (a heartbeat's first
 * progress row: they deadlocked). And the handlers' connection prepares each statement once a session
 * (pg.h), and again in a new session. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg.h"
#include "rpc.h"
#include "service_internal.h"
#include "test.h"

static PGconn *db;
static struct scheduler_options opts;
static struct scheduler sched = {.opts = &opts};

/* The first value of a query's first row ("" when none), in a buffer of its own. */
static const char *q(const char *sql) {
    static char out[512];
    PGresult *res = PQexec(db, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK)
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(db));
    snprintf(out, sizeof out, "%s", PQntuples(res) && PQnfields(res) ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    return out;
}

/* The handler of `path`, as the server finds it. */
static const struct rpc_method *method(const char *path) {
    for (int i = 0; i < scheduler_n_methods; i++)
        if (!strcmp(scheduler_methods[i].path, path)) return &scheduler_methods[i];
    return NULL;
}

/* Calls the handler of `path` as the server would; returns its status, err holding its message. */
static int call(const char *path, const ProtobufCMessage *req, struct whet_err *err) {
    ProtobufCMessage *resp = NULL;
    int rc = method(path)->handler(&sched, req, &resp, err);
    if (resp) method(path)->free_resp(resp);
    return rc;
}

static int event(const char *node, const char *job, unsigned attempt, unsigned seq) {
    Whet__V1__Event e = WHET__V1__EVENT__INIT, *es[] = {&e};
    e.job_id = (char *)job;
    e.attempt = attempt;
    e.seq = seq;
    e.level = "info";
    e.type = "message";
    e.message = "a fenced event";
    Whet__V1__ReportEventsRequest req = WHET__V1__REPORT_EVENTS_REQUEST__INIT;
    req.node_id = (char *)node;
    req.n_events = 1;
    req.events = es;
    struct whet_err err;
    return call("/whet.v1.Scheduler/ReportEvents", &req.base, &err);
}

static int checkpoint(const char *node, const char *job, unsigned attempt, unsigned step, struct whet_err *err) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "jobs/%s/attempt-%u/checkpoints/step-%u", job, attempt, step);
    Whet__V1__CheckpointReport req = WHET__V1__CHECKPOINT_REPORT__INIT;
    req.node_id = (char *)node;
    req.job_id = (char *)job;
    req.attempt = attempt;
    req.step = step;
    req.object_prefix = prefix;
    req.bytes = 100;
    return call("/whet.v1.Scheduler/ReportCheckpoint", &req.base, err);
}

/* FinishJob; a success names attempt's final model, listed as the checkpoint of step 42. */
static int finish(const char *node, const char *job, unsigned attempt, Whet__V1__FinishJobRequest__Outcome outcome) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "jobs/%s/attempt-%u/final", job, attempt);
    Whet__V1__Usage usage = WHET__V1__USAGE__INIT;
    usage.device_type = "H100";
    usage.device_seconds = 10;
    usage.trained_tokens = 1000;
    Whet__V1__FinishJobRequest req = WHET__V1__FINISH_JOB_REQUEST__INIT;
    req.node_id = (char *)node;
    req.job_id = (char *)job;
    req.attempt = attempt;
    req.outcome = outcome;
    req.usage = &usage;
    if (outcome == WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED) {
        req.final_object_prefix = prefix;
        req.final_step = 42;
        req.final_bytes = 200;
        req.final_metrics_json = "{\"step\":42}";
    }
    struct whet_err err;
    return call("/whet.v1.Scheduler/FinishJob", &req.base, &err);
}

/* Job `job`: attempt 1 on node-a, lost (metered as leases.c meters it, its checkpoint of step 5
 * recorded), attempt 2 running on node-b from step 5. */
static void moved_job(const char *job) {
    char sql[2048];
    snprintf(
        sql, sizeof sql,
        "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, node_id)"
        "  VALUES ('%1$s', 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1, 'running', 2, 'node-b');"
        "INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, device_type, ended_at, outcome)"
        "  VALUES ('%1$s', 1, 't1', 'node-a', 'H100', extract(epoch FROM clock_timestamp()), 'lost');"
        "INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, device_type, resume_step)"
        "  VALUES ('%1$s', 2, 't1', 'node-b', 'H100', 5);"
        "INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, lost,"
        "  job_created_at) SELECT 't1', '%1$s', 1, 0, 'H100', 3, true, created_at FROM jobs WHERE id = '%1$s';"
        "INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix,"
        "  attempt) VALUES ('ckpt-%1$s-5', 't1', '%1$s', 5, 'ft:x', 'jobs/%1$s/attempt-1/checkpoints/step-5', 1)",
        job);
    q(sql);
}

static const char *count(const char *what, const char *job, const char *where) {
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE job_id = '%s' AND %s", what, job, where);
    return q(sql);
}

TEST(a_stale_attempt_changes_nothing_and_is_told_so) {
    moved_job("ftjob-stale");
    struct whet_err err;
    CHECK(event("node-a", "ftjob-stale", 1, 7) == RPC_FAILED_PRECONDITION);
    CHECK_STR(count("job_events", "ftjob-stale", "attempt = 1"), "0");
    CHECK(checkpoint("node-a", "ftjob-stale", 1, 10, &err) == RPC_FAILED_PRECONDITION);
    CHECK_CONTAINS(err.msg, "attempt 1 of job ftjob-stale is no longer current");
    CHECK_STR(count("checkpoints", "ftjob-stale", "true"), "1");
    CHECK(finish("node-a", "ftjob-stale", 1, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__STOPPED) ==
          RPC_FAILED_PRECONDITION);
    CHECK_STR(q("SELECT status || ' ' || attempt FROM jobs WHERE id = 'ftjob-stale'"), "running 2");
    CHECK_STR(q("SELECT outcome FROM job_attempts WHERE job_id = 'ftjob-stale' AND attempt = 1"), "lost");
    /* Attempt 2 reports from the wrong node: refused as well. */
    CHECK(event("node-a", "ftjob-stale", 2, 1) == RPC_FAILED_PRECONDITION);

    /* node-a's heartbeat: it is lost, so it registers again, and attempt 1's progress is not written. */
    Whet__V1__JobProgress p = WHET__V1__JOB_PROGRESS__INIT, *ps[] = {&p};
    p.job_id = "ftjob-stale";
    p.attempt = 1;
    p.step = 30;
    p.total_steps = 42;
    Whet__V1__HeartbeatRequest hb = WHET__V1__HEARTBEAT_REQUEST__INIT;
    hb.node_id = "node-a";
    hb.n_jobs = 1;
    hb.jobs = ps;
    const struct rpc_method *heartbeat = method("/whet.v1.Scheduler/Heartbeat");
    Whet__V1__HeartbeatResponse *resp = NULL;
    CHECK(heartbeat->handler(&sched, &hb.base, (ProtobufCMessage **)&resp, &err) == RPC_OK);
    CHECK(resp && resp->reregister);
    if (resp) heartbeat->free_resp(&resp->base);
    CHECK_STR(count("job_progress", "ftjob-stale", "last_step = 30"), "0");

    /* The current attempt's reports apply, once. */
    CHECK(event("node-b", "ftjob-stale", 2, 1) == RPC_OK);
    CHECK(event("node-b", "ftjob-stale", 2, 1) == RPC_OK);
    CHECK_STR(count("job_events", "ftjob-stale", "attempt = 2 AND report_seq = 1"), "1");
    CHECK(checkpoint("node-b", "ftjob-stale", 2, 10, &err) == RPC_OK);
    CHECK(checkpoint("node-b", "ftjob-stale", 2, 10, &err) == RPC_OK);
    CHECK_STR(q("SELECT string_agg(step_number || ':' || attempt || ':' || object_prefix, ',' ORDER BY step_number)"
                " FROM checkpoints WHERE job_id = 'ftjob-stale'"),
              "5:1:jobs/ftjob-stale/attempt-1/checkpoints/step-5,10:2:jobs/ftjob-stale/attempt-2/checkpoints/step-10");
}

TEST(a_late_success_is_refused_once_the_newer_attempt_has_checkpoints) {
    moved_job("ftjob-late-refused");
    struct whet_err err;
    CHECK(checkpoint("node-b", "ftjob-late-refused", 2, 10, &err) == RPC_OK);
    CHECK(finish("node-a", "ftjob-late-refused", 1, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED) ==
          RPC_FAILED_PRECONDITION);
    CHECK_STR(q("SELECT status || ' ' || coalesce(final_object_prefix, '-') FROM jobs WHERE id = 'ftjob-late-refused'"),
              "running -");
    CHECK_STR(count("checkpoints", "ftjob-late-refused", "step_number = 42"), "0");
    CHECK_STR(count("node_commands", "ftjob-late-refused", "kind = 'cancel'"), "0");
    CHECK_STR(count("usage_records", "ftjob-late-refused", "device_seconds = 3 AND lost"), "1");

    /* Attempt 2 finishes: its final model is the job's, listed as its last checkpoint. */
    CHECK(finish("node-b", "ftjob-late-refused", 2, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED) == RPC_OK);
    CHECK(finish("node-b", "ftjob-late-refused", 2, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED) == RPC_OK);
    CHECK_STR(q("SELECT status || ' ' || final_object_prefix FROM jobs WHERE id = 'ftjob-late-refused'"),
              "succeeded jobs/ftjob-late-refused/attempt-2/final");
    CHECK_STR(q("SELECT attempt || ' ' || object_prefix FROM checkpoints WHERE job_id = 'ftjob-late-refused'"
                " AND step_number = 42"),
              "2 jobs/ftjob-late-refused/attempt-2/final");
    CHECK_STR(q("SELECT string_agg(attempt || ':' || lost, ',' ORDER BY attempt) FROM usage_records"
                " WHERE job_id = 'ftjob-late-refused'"),
              "1:true,2:false");
}

TEST(a_late_success_is_taken_while_the_newer_attempt_has_none) {
    moved_job("ftjob-late-taken");
    struct whet_err err;
    CHECK(finish("node-a", "ftjob-late-taken", 1, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED) == RPC_OK);
    CHECK_STR(q("SELECT status || ' ' || final_object_prefix FROM jobs WHERE id = 'ftjob-late-taken'"),
              "succeeded jobs/ftjob-late-taken/attempt-1/final");
    CHECK_STR(q("SELECT attempt || ' ' || object_prefix FROM checkpoints WHERE job_id = 'ftjob-late-taken'"
                " AND step_number = 42"),
              "1 jobs/ftjob-late-taken/attempt-1/final");
    CHECK_STR(count("node_commands", "ftjob-late-taken", "kind = 'cancel' AND attempt = 2 AND node_id = 'node-b'"),
              "1");
    CHECK_STR(count("usage_records", "ftjob-late-taken", "attempt = 1 AND lost AND device_seconds = 10"), "1");
    /* A retry of the taken success is answered as the first was. */
    CHECK(finish("node-a", "ftjob-late-taken", 1, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED) == RPC_OK);
    /* The cancelled attempt reports on before its cancel arrives: refused, the job ended. */
    CHECK(checkpoint("node-b", "ftjob-late-taken", 2, 10, &err) == RPC_FAILED_PRECONDITION);
    CHECK(event("node-b", "ftjob-late-taken", 2, 1) == RPC_FAILED_PRECONDITION);
    /* Its end is its own (metered), and changes nothing of the job; a success of it adds no checkpoint. */
    CHECK(finish("node-b", "ftjob-late-taken", 2, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED) == RPC_OK);
    CHECK_STR(q("SELECT status || ' ' || final_object_prefix FROM jobs WHERE id = 'ftjob-late-taken'"),
              "succeeded jobs/ftjob-late-taken/attempt-1/final");
    CHECK_STR(q("SELECT string_agg(step_number || ':' || attempt, ',' ORDER BY step_number) FROM checkpoints"
                " WHERE job_id = 'ftjob-late-taken'"),
              "5:1,42:1");
    CHECK_STR(q("SELECT string_agg(attempt || ':' || lost, ',' ORDER BY attempt) FROM usage_records"
                " WHERE job_id = 'ftjob-late-taken'"),
              "1:true,2:false");
    CHECK_STR(count("job_events", "ftjob-late-taken", "message = 'The job has successfully completed'"), "1");
}

/* The handlers' connection's prepared statements, as its session lists them. */
static int prepared_statements(PGconn *conn) {
    PGresult *res = PQexec(conn, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'whet\\_%'");
    int n = PQresultStatus(res) == PGRES_TUPLES_OK ? atoi(PQgetvalue(res, 0, 0)) : -1;
    PQclear(res);
    return n;
}

static void test_the_handlers_prepare_each_statement_once_a_session(void) {
    struct whet_err err;
    PGconn *conn = scheduler_handler_conn(&sched, &err);
    int before = prepared_statements(conn);
    CHECK(before > 0); /* the tests above ran the handlers' statements */
    moved_job("ftjob-prepared");
    CHECK(checkpoint("node-b", "ftjob-prepared", 2, 7, &err) == RPC_OK);
    CHECK(event("node-a", "ftjob-prepared", 1, 1) == RPC_FAILED_PRECONDITION);
    CHECK(prepared_statements(conn) == before); /* nothing new to prepare: the same statements again */
    PQreset(conn);                              /* a new session, with nothing prepared: the cache starts again */
    CHECK(prepared_statements(conn) == 0);
    CHECK(checkpoint("node-b", "ftjob-prepared", 2, 8, &err) == RPC_OK);
    CHECK(event("node-b", "ftjob-prepared", 2, 2) == RPC_OK);
    CHECK(prepared_statements(conn) > 0);
    CHECK_STR(q("SELECT string_agg(step_number::text, ',' ORDER BY step_number) FROM checkpoints"
                " WHERE job_id = 'ftjob-prepared' AND attempt = 2"),
              "7,8");
}

static void *finish_attempt_2(void *arg) {
    __atomic_store_n((int *)arg,
                     finish("node-b", "ftjob-keyshare", 2, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED),
                     __ATOMIC_SEQ_CST);
    return NULL;
}

/* A heartbeat inserting a job's first progress row checks the job's key (FOR KEY SHARE) and holds that
 * until it commits. A FinishJob of the job meanwhile goes through without waiting: when it took the job's
 * row FOR UPDATE it waited there, and the heartbeat, next waiting for the progress row FinishJob had
 * upserted in another order, made a deadlock. Any wait of the handler's backend on a lock fails this. */
TEST(a_finish_does_not_wait_for_its_jobs_key_checks) {
    moved_job("ftjob-keyshare");
    PGconn *holder = PQconnectdb(opts.database_url);
    PQclear(PQexec(holder, "BEGIN"));
    PGresult *res = PQexec(holder, "SELECT 1 FROM jobs WHERE id = 'ftjob-keyshare' FOR KEY SHARE");
    CHECK(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1);
    PQclear(res);
    int rc = -1, waited = 0;
    pthread_t t;
    pthread_create(&t, NULL, finish_attempt_2, &rc);
    for (int i = 0; i < 250 && __atomic_load_n(&rc, __ATOMIC_SEQ_CST) == -1; i++) {
        if (strcmp(q("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                     " AND wait_event_type = 'Lock'"),
                   "0") != 0) {
            waited = 1;
            break;
        }
        usleep(20 * 1000);
    }
    PQclear(PQexec(holder, "COMMIT")); /* lets a waiting FinishJob go on */
    pthread_join(t, NULL);
    PQfinish(holder);
    CHECK_MSG(!waited, "FinishJob waited for a lock the key check holds");
    CHECK(rc == RPC_OK);
    CHECK_STR(q("SELECT status FROM jobs WHERE id = 'ftjob-keyshare'"), "succeeded");
}

/* A database of this test's own, migrated; NULL when there is no PostgreSQL to test with. */
static char *create_database(void) {
    const char *admin = getenv("WHET_TEST_DATABASE_URL"), *build = getenv("WHET_BUILD_DIR");
    if (!admin || !build) return NULL;
    PGconn *c = PQconnectdb(admin);
    char name[64], sql[128];
    snprintf(name, sizeof name, "whet_fencing_%d", (int)getpid());
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    PGresult *res = PQexec(c, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
        exit(1);
    }
    PQclear(res);
    PQfinish(c);
    const char *slash = strrchr(admin, '/');
    char *url = xasprintf("%.*s/%s", (int)(slash - admin), admin, name);
    char *migrate = xasprintf("WHET_DATABASE_URL='%s' WHET_LOG_LEVEL=warn '%s/whet' migrate >/dev/null", url, build);
    int rc = system(migrate);
    free(migrate);
    if (rc != 0) {
        fprintf(stderr, "whet migrate failed\n");
        exit(1);
    }
    return url;
}

static void drop_database(void) {
    PGconn *c = PQconnectdb(getenv("WHET_TEST_DATABASE_URL"));
    char sql[128];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS whet_fencing_%d WITH (FORCE)", (int)getpid());
    PQclear(PQexec(c, sql));
    PQfinish(c);
}

int main(void) {
    char *url = create_database();
    if (!url) {
        fprintf(stderr, "WHET_TEST_DATABASE_URL is not set (tests/run.sh starts PostgreSQL)\n");
        return 1;
    }
    opts.database_url = url;
    opts.lease_ms = 3000;
    scheduler_progress_init(0);
    db = PQconnectdb(url);
    q("INSERT INTO tenants (id, name) VALUES ('t1', 'acme');"
      "INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)"
      "  VALUES ('tiny', 'LlamaForCausalLM', 1000, 'models/tiny', 'abc', '{}');"
      "INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key)"
      "  VALUES ('file-1', 't1', 'fine-tune', 'train.jsonl', 10, 'x', 'files/file-1');"
      "INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms, state) VALUES"
      "  ('node-a', 'dc-a', 'dc-a', '[]', 'H100', 1, 1000, 1024, 3000, 'lost'),"
      "  ('node-b', 'dc-b', 'dc-b', '[]', 'H100', 1, 1000, 1024, 3000, 'ready')");
    RUN(a_stale_attempt_changes_nothing_and_is_told_so);
    RUN(a_late_success_is_refused_once_the_newer_attempt_has_checkpoints);
    RUN(a_late_success_is_taken_while_the_newer_attempt_has_none);
    RUN(the_handlers_prepare_each_statement_once_a_session);
    RUN(a_finish_does_not_wait_for_its_jobs_key_checks);
    PQfinish(db);
    drop_database(); /* WITH (FORCE): the handlers' connection goes with it */
    free(url);
    scheduler_progress_free();
    return test_summary();
}
