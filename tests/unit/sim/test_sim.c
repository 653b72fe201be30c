/* test_sim.c - `whet sim`'s parsers and experiments: malformed node, pod and trace files are rejected
 * with the line number and column; good ones parse to what the columns say; the inflation
 * experiment is reproducible and its numbers add up. */
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "test.h"

TEST(fleet_parses) {
    struct sim_fleet f;
    struct whet_err err = {0};
    const char *csv = "sn,cpu_milli,memory_mib,gpu,model,dc\n"
                      "a,64000,262144,2,P100,eu\n"
                      "b,96000,393216,8,G2,us\r\n"
                      "\n"
                      "c,8000,1024,0,,eu\n";
    CHECK_MSG(sim_fleet_parse(&f, "n.csv", csv, &err) == 0, "%s", err.msg);
    CHECK(f.n_nodes == 3);
    CHECK(f.types.n == 2 && !strcmp(f.types.names[1], "G2"));
    CHECK(f.dcs.n == 2 && f.nodes[1].dc == 1 && f.nodes[2].dc == 0);
    CHECK(f.nodes[1].gpus == 8 && f.nodes[1].gpu_type == 1 && f.nodes[1].gpu_free_milli[7] == 1000);
    CHECK(f.nodes[2].gpus == 0 && f.nodes[2].gpu_type == -1);
    CHECK(f.nodes[0].cpu_free_milli == 64000 && f.nodes[0].mem_mib == 262144);
    sim_fleet_free(&f);
    /* Without a dc column every node is in dc0. */
    CHECK(sim_fleet_parse(&f, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nx,1,1,1,T4\n", &err) == 0);
    CHECK(f.dcs.n == 1 && !strcmp(f.dcs.names[0], "dc0"));
    sim_fleet_free(&f);
}

static void fleet_rejects(const char *csv, const char *want) {
    struct sim_fleet f;
    struct whet_err err = {0};
    CHECK_MSG(sim_fleet_parse(&f, "nodes.csv", csv, &err) == -1, "accepted: %s", csv);
    CHECK_CONTAINS(err.msg, want);
}

TEST(fleet_rejects_malformed_lines) {
    fleet_rejects("sn,cpu_milli,memory_mib,gpu,model\na,1,1,2,T4\nb,1,1,x,T4\n", "nodes.csv: line 3: gpu: expected an integer");
    fleet_rejects("sn,cpu_milli,memory_mib,gpu,model\na,1,1,17,T4\n", "line 2: gpu: expected an integer 0..16");
    fleet_rejects("sn,cpu_milli,memory_mib,gpu,model\na,1,1,2\n", "line 2: expected 5 columns, found 4");
    fleet_rejects("sn,cpu_milli,memory_mib,model\na,1,1,T4\n", "line 1: header: missing column \"gpu\"");
    fleet_rejects("sn,cpu_milli,memory_mib,gpu,model\n\n\na,-5,1,2,T4\n", "line 4: cpu_milli");
    fleet_rejects("sn,cpu_milli,memory_mib,gpu,model\na,1,1,2,\n", "line 2: model: empty");
    fleet_rejects("sn,cpu_milli,memory_mib,gpu,model\n\"a\",1,1,2,T4\n", "line 2: quoted fields");
    fleet_rejects("sn,cpu_milli,memory_mib,gpu,model\n", "no nodes");
    fleet_rejects("", "line 1: missing header");
}

TEST(pods_parse_and_constrain_types) {
    struct sim_fleet f;
    struct sim_pods p;
    struct whet_err err = {0};
    CHECK(sim_fleet_parse(&f, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,1,1,2,T4\nb,1,1,8,G2\n", &err) == 0);
    const char *csv = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                      "p0,12000,16384,1,460,\n"
                      "p1,8000,100,4,1000,G2|T4\n"
                      "p2,1000,100,0,0,\n"
                      "p3,1000,100,1,1000,A100\n";
    CHECK_MSG(sim_pods_parse(&p, &f, "pods.csv", csv, &err) == 0, "%s", err.msg);
    CHECK(p.n == 4);
    CHECK(p.pods[0].gpus == 1 && p.pods[0].gpu_milli == 460 && p.pods[0].allowed_types == 0);
    CHECK(p.pods[1].allowed_types == 3); /* T4 is type 0, G2 type 1 */
    CHECK(p.pods[2].gpus == 0 && p.pods[2].cpu_milli == 1000);
    /* A type the fleet lacks still constrains: a new id no node has. */
    CHECK(f.types.n == 3 && p.pods[3].allowed_types == 4);
    sim_pods_free(&p);

    CHECK(sim_pods_parse(&p, &f, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,1500\n", &err) == -1);
    CHECK_CONTAINS(err.msg, "pods.csv: line 2: gpu_milli: expected an integer 0..1000, got \"1500\"");
    CHECK(sim_pods_parse(&p, &f, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,100\nb,1,1,2,500\n",
                         &err) == -1);
    CHECK_CONTAINS(err.msg, "line 3: gpu_milli: a share (500) of more than one GPU");
    CHECK(sim_pods_parse(&p, &f, "pods.csv", "name,cpu_milli,memory_mib,num_gpu\na,1,1,1\n", &err) == -1);
    CHECK_CONTAINS(err.msg, "missing column \"gpu_milli\"");
    sim_fleet_free(&f);
}

TEST(trace_parses_sorted_and_rejects) {
    struct sim_trace t;
    struct whet_err err = {0};
    const char *csv = "timestamp,duration,num_gpus,gpu_time,cluster\n"
                      "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
                      "2017-10-09 06:13:03,2951.0,8,23608.0,6214e9\n"
                      "2017-10-09 06:13:03,10,2,20,11cb48\n";
    CHECK_MSG(sim_trace_parse(&t, "p.csv", csv, &err) == 0, "%s", err.msg);
    CHECK(t.n == 3 && t.tenants.n == 2);
    /* Sorted by submit time, ties in file order, times relative to the first. */
    CHECK(t.jobs[0].line == 3 && t.jobs[1].line == 4 && t.jobs[2].line == 2);
    CHECK(t.jobs[0].submit_s == 0 && t.jobs[2].submit_s == 48 * 60 + 52);
    CHECK(t.jobs[0].gpus == 8 && t.jobs[0].duration_s == 2951 && t.jobs[0].tenant == 1);
    sim_trace_free(&t);

    CHECK(sim_trace_parse(&t, "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1,1,1,a\n"
                                       "2017-13-09 07:01:55,1,1,1,a\n", &err) == -1);
    CHECK_CONTAINS(err.msg, "p.csv: line 3: timestamp: expected YYYY-MM-DD HH:MM:SS");
    CHECK(sim_trace_parse(&t, "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1,0,1,a\n",
                          &err) == -1);
    CHECK_CONTAINS(err.msg, "line 2: num_gpus");
    CHECK(sim_trace_parse(&t, "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,abc,1,1,a\n",
                          &err) == -1);
    CHECK_CONTAINS(err.msg, "line 2: duration: expected a number");
    CHECK(sim_trace_parse(&t, "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1,1,1,\n",
                          &err) == -1);
    CHECK_CONTAINS(err.msg, "line 2: cluster: empty");
}

TEST(policies_list) {
    char names[8][16];
    struct whet_err err = {0};
    CHECK(sim_policies("fifo,bestfit,las,whet", names, 8, &err) == 4);
    CHECK_STR(names[3], "whet");
    CHECK(sim_policies("fifo,random", names, 8, &err) == -1);
    CHECK_CONTAINS(err.msg, "unknown policy \"random\"");
    CHECK(sim_policies("fifo,", names, 8, &err) == -1);
}

TEST(rng_reproducible) {
    struct rng a, b;
    rng_seed(&a, 7);
    rng_seed(&b, 7);
    int same = 1, in_range = 1;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_below(&a, 10), y = rng_below(&b, 10);
        same &= x == y;
        in_range &= x < 10;
    }
    CHECK(same && in_range);
    rng_seed(&b, 8);
    CHECK(rng_u64(&a) != rng_u64(&b));
}

/* Runs inflate into a buffer and pulls a number field out of the JSON line. */
static double field(const char *json, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(json, key);
    return p ? atof(p + strlen(key)) : -1;
}

TEST(inflate_adds_up_and_is_reproducible) {
    struct sim_fleet f;
    struct sim_pods p;
    struct whet_err err = {0};
    /* 4 nodes x 2 GPUs (8 GPUs); tasks: whole GPUs, halves, a 2-GPU gang, CPU-only. */
    CHECK(sim_fleet_parse(&f, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,8000,8000,2,T4\nb,8000,8000,2,T4\n"
                                       "c,8000,8000,2,T4\nd,8000,8000,2,T4\n", &err) == 0);
    CHECK(sim_pods_parse(&p, &f, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,100,1,1000\n"
                                         "b,1000,100,1,500\nc,2000,100,2,1000\nd,500,100,0,0\n", &err) == 0);
    const char *policies[4] = {"fifo", "bestfit", "las", "whet"};
    for (int i = 0; i < 4; i++) {
        char *buf1 = NULL, *buf2 = NULL;
        size_t len1, len2;
        FILE *o1 = open_memstream(&buf1, &len1), *o2 = open_memstream(&buf2, &len2);
        struct sim_inflate_opts o = {1.3, 42};
        CHECK(sim_inflate(o1, &f, &p, &o, policies[i], &err) == 0);
        CHECK(sim_inflate(o2, &f, &p, &o, policies[i], &err) == 0);
        fclose(o1);
        fclose(o2);
        double tasks = field(buf1, "tasks"), placed = field(buf1, "placed"), failed = field(buf1, "failed");
        double alloc = field(buf1, "allocation_pct"), req = field(buf1, "requested_pct");
        CHECK(tasks > 0 && placed + failed == tasks);
        CHECK(req >= 130 && alloc > 0 && alloc <= 100);
        CHECK(failed > 0); /* 130% cannot all fit */
        CHECK(field(buf2, "placed") == placed && field(buf2, "allocation_pct") == alloc);
        CHECK_CONTAINS(buf1, policies[i]);
        free(buf1);
        free(buf2);
    }
    struct sim_inflate_opts bad = {0, 1};
    CHECK(sim_inflate(stdout, &f, &p, &bad, "whet", &err) == -1);
    CHECK_CONTAINS(err.msg, "--load");
    sim_pods_free(&p);
    sim_fleet_free(&f);
}

TEST(replay_small_trace) {
    struct sim_fleet f;
    struct sim_trace t;
    struct whet_err err = {0};
    CHECK(sim_fleet_parse(&f, "n.csv", "sn,cpu_milli,memory_mib,gpu,model,dc\na,8000,8000,4,V100,x\n"
                                       "b,8000,8000,4,V100,x\nc,8000,8000,4,V100,y\n", &err) == 0);
    /* Six 4-GPU jobs of an hour at once on 12 GPUs: three run, three queue; a 16-GPU job is wider
     * than any data center's pool and can never run. */
    const char *csv = "timestamp,duration,num_gpus,gpu_time,cluster\n"
                      "2017-10-01 00:00:00,3600,4,1,a\n2017-10-01 00:00:00,3600,4,1,a\n"
                      "2017-10-01 00:00:00,3600,4,1,b\n2017-10-01 00:00:00,3600,4,1,b\n"
                      "2017-10-01 00:00:00,3600,4,1,a\n2017-10-01 00:00:00,3600,4,1,b\n"
                      "2017-10-01 00:00:00,3600,16,1,b\n";
    CHECK(sim_trace_parse(&t, "t.csv", csv, &err) == 0);
    struct sim_replay_opts o = {0, 1800, 60, 30};
    const char *policies[3] = {"fifo", "las", "whet"};
    for (int i = 0; i < 3; i++) {
        char *buf = NULL;
        size_t len;
        FILE *out = open_memstream(&buf, &len);
        CHECK(sim_replay(out, &f, &t, &o, policies[i], &err) == 0);
        fclose(out);
        CHECK(field(buf, "finished") == 6 && field(buf, "unplaceable") == 1);
        CHECK(field(buf, "makespan_s") >= 7200);
        CHECK(field(buf, "avg_queue_s") > 0 && field(buf, "p99_jct_s") >= 7200);
        CHECK_CONTAINS(buf, "\"a\":{\"jobs\":3");
        free(buf);
    }
    sim_trace_free(&t);
    sim_fleet_free(&f);
}

int main(void) {
    RUN(fleet_parses);
    RUN(fleet_rejects_malformed_lines);
    RUN(pods_parse_and_constrain_types);
    RUN(trace_parses_sorted_and_rejects);
    RUN(policies_list);
    RUN(rng_reproducible);
    RUN(inflate_adds_up_and_is_reproducible);
    RUN(replay_small_trace);
    return test_summary();
}
