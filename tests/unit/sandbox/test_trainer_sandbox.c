/* test_trainer_sandbox.c - the sandbox the executor gives a job's trainer (trainer_sandbox.h).
 *
 * A job that grades with python gets a sandbox its trainer can build pygrader's sandboxes in: a
 * sandboxed process (`whet sandbox grade`, pygrader_run behind a command line) grades inside it,
 * with the tenant's socket() failing as in the graders API. Any other job's trainer can build no
 * sandbox, and a socket() or any call reaching past the process ends it, the sandbox naming the call. Under a root executor the trainer is host uid 65534, owning its
 * job dir and nothing else. A GPU gang's ranks on one node share a /dev/shm (NCCL's SHM transport) that
 * no other job sees, removed with the node's last rank, and get NCCL's environment.
 *
 * Usage: test_trainer_sandbox WHET_BINARY */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "trainer_sandbox.h"

static char whet_bin[4096], bin_dir[4096], dir[64], grader_path[128];

static json_t *config(const char *grader_json) {
    json_t *cfg = json_pack("{s:s}", "method", grader_json ? "grpo" : "sft");
    if (grader_json) json_object_set_new(cfg, "grader", json_loads(grader_json, 0, NULL));
    return cfg;
}

TEST(python_graders_are_found_at_the_top_and_inside_multi) {
    static const struct {
        const char *grader;
        int python;
    } cases[] = {
        {"{\"type\": \"python\", \"name\": \"p\", \"source\": \"def grade(s, i): return 1\"}", 1},
        {"{\"type\": \"string_check\", \"name\": \"s\", \"input\": \"a\", \"reference\": \"b\", \"operation\": \"eq\"}", 0},
        {"{\"type\": \"multi\", \"name\": \"m\", \"calculate_output\": \"a + b\", \"graders\": {"
         "\"a\": {\"type\": \"string_check\", \"name\": \"a\", \"input\": \"x\", \"reference\": \"x\", \"operation\": \"eq\"},"
         "\"b\": {\"type\": \"python\", \"name\": \"b\", \"source\": \"def grade(s, i): return 1\"}}}", 1},
        {"{\"type\": \"multi\", \"name\": \"m\", \"calculate_output\": \"a\", \"graders\": {"
         "\"a\": {\"type\": \"text_similarity\", \"name\": \"a\", \"input\": \"x\", \"reference\": \"x\","
         " \"evaluation_metric\": \"bleu\"}}}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *g = json_loads(cases[i].grader, 0, NULL);
        CHECK_MSG(g && trainer_grader_runs_python(g) == cases[i].python, "case %zu", i);
        json_decref(g);
    }
    CHECK(trainer_grader_runs_python(NULL) == 0);

    struct sandbox_spec spec;
    json_t *sft = config(NULL), *grpo = config(cases[2].grader);
    sandbox_spec_init(&spec);
    trainer_sandbox_policy(&spec, sft);
    CHECK(!spec.allow_nested && spec.kill_on_network);
    sandbox_spec_init(&spec);
    trainer_sandbox_policy(&spec, grpo);
    CHECK(spec.allow_nested && !spec.kill_on_network);
    /* a co-training group's process: a python grader in any member's config, wherever it is, counts */
    const json_t *group[] = {sft, grpo, sft};
    for (int n = 1; n <= 3; n++) {
        sandbox_spec_init(&spec);
        trainer_sandbox_policy_all(&spec, group, n);
        CHECK_MSG(spec.allow_nested == (n > 1) && spec.kill_on_network == (n == 1), "%d members", n);
    }
    sandbox_spec_init(&spec);
    trainer_sandbox_policy_all(&spec, group + 1, 2);
    CHECK(spec.allow_nested && !spec.kill_on_network);
    json_decref(sft);
    json_decref(grpo);
}

/* Runs `argv` in the trainer's sandbox for a job whose config is `cfg`, with `input` on stdin. */
static void run_as_trainer(struct sandbox_job *job, const json_t *cfg, const char *const *argv, const char *input) {
    static const char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8",
                                      "ASAN_OPTIONS=detect_leaks=0", NULL};
    static const char *readonly[3];
    readonly[0] = bin_dir;
    readonly[1] = dir;
    memset(job, 0, sizeof *job);
    sandbox_spec_init(&job->spec);
    trainer_sandbox_policy(&job->spec, cfg);
    job->spec.argv = argv;
    job->spec.env = env;
    job->spec.readonly_dirs = readonly;
    job->spec.wall_timeout_s = 60;
    job->input = input;
    job->input_len = input ? strlen(input) : 0;
    struct whet_err err;
    CHECK_MSG(sandbox_run(job, &err) == 0, "%s", err.msg);
}

static const char pairs[] = "{\"sample\":{\"output_text\":\"4\"},\"item\":{\"answer\":\"4\"}}\n"
                            "{\"sample\":{\"output_text\":\"5\"},\"item\":{\"answer\":\"4\"}}\n"
                            "{\"sample\":{\"output_text\":\"4\"},\"item\":{\"answer\":\"4\",\"socket\":true}}\n";

TEST(a_python_grading_job_grades_in_nested_sandboxes) {
    json_t *cfg = config("{\"type\": \"python\", \"name\": \"p\", \"source\": \"\"}");
    const char *argv[] = {whet_bin, "sandbox", "grade", "--source", grader_path, "--timeout", "5", NULL};
    struct sandbox_job job;
    run_as_trainer(&job, cfg, argv, pairs);
    CHECK_MSG(job.result.reason == SANDBOX_OK, "%s: %s", job.result.message, job.errout);
    char *second = job.out ? strchr(job.out, '\n') : NULL;
    CHECK_MSG(job.out && !strncmp(job.out, "{\"score\":1.0}\n{\"score\":0.0}\n", 28), "%s", job.out);
    /* The tenant's socket() fails inside (as in the graders API), rather than killing its python. */
    CHECK_MSG(second && strstr(second, "\"score\":0.0,\"error\":\"PermissionError"), "%s", job.out);
    sandbox_job_release(&job);
    json_decref(cfg);
}

TEST(any_other_job_can_build_no_sandbox_and_dies_on_a_socket) {
    json_t *cfg = config(NULL);
    const char *grade[] = {whet_bin, "sandbox", "grade", "--source", grader_path, "--timeout", "5", NULL};
    struct sandbox_job job;
    run_as_trainer(&job, cfg, grade, pairs);
    CHECK_MSG(job.out && strstr(job.out, "clone with new namespaces: Operation not permitted"), "%s", job.out);
    sandbox_job_release(&job);

    /* The sandbox names the call: a socket, or one of those that reach past the process (mount). */
    static const struct {
        const char *code, *call;
    } calls[] = {
        {"import socket; print('trying', flush=True); socket.socket(); print('connected')", "socket"},
        {"import ctypes; print('trying', flush=True); ctypes.CDLL(None).mount(b'none', b'/tmp', b'tmpfs', 0, None)",
         "mount"},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        const char *py[] = {"/usr/bin/python3", "-c", calls[i].code, NULL};
        run_as_trainer(&job, cfg, py, NULL);
        CHECK_MSG(job.result.reason == SANDBOX_SECCOMP, "%s: %s", job.result.message, job.errout);
        CHECK_STR(job.result.syscall, calls[i].call);
        CHECK_CONTAINS(job.result.message, calls[i].call);
        CHECK_STR(job.out, "trying\n"); /* it got that far, and no further */
        sandbox_job_release(&job);
    }
    json_decref(cfg);
}

TEST(a_root_executor_runs_the_trainer_as_nobody_in_its_own_job_dir) {
    if (geteuid() != 0) {
        printf("(not root: the trainer keeps the executor's uid; nothing to check)\n");
        return;
    }
    char job_dir[128], model_dir[128], model_file[160], written[160];
    snprintf(job_dir, sizeof job_dir, "%s/job", dir);
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    snprintf(model_file, sizeof model_file, "%s/weights", model_dir);
    snprintf(written, sizeof written, "%s/out", job_dir);
    struct whet_err err;
    CHECK(whet_mkdir_p(job_dir, &err) == 0 && whet_mkdir_p(model_dir, &err) == 0);
    CHECK(chmod(model_dir, 0700) == 0);
    CHECK(whet_write_file_atomic_mode(model_file, "w", 1, 0600, &err) == 0); /* as the object store leaves it */
    json_t *cfg = config(NULL);
    struct sandbox_job job;
    memset(&job, 0, sizeof job);
    sandbox_spec_init(&job.spec);
    trainer_sandbox_policy(&job.spec, cfg);
    CHECK(job.spec.host_uid == TRAINER_HOST_UID && job.spec.host_gid == TRAINER_HOST_UID);
    CHECK_MSG(trainer_sandbox_hand_over(&job.spec, job_dir, model_dir, &err) == 0, "%s", err.msg);
    char script[1024];
    snprintf(script, sizeof script, "cat %s && echo trained > %s && ! echo x 2>/dev/null > %s", model_file, written,
             model_file);
    const char *argv[] = {"/bin/sh", "-c", script, NULL};
    const char *writable[] = {job_dir, NULL}, *readonly[] = {model_dir, NULL};
    job.spec.argv = argv;
    job.spec.writable_dirs = writable;
    job.spec.readonly_dirs = readonly;
    job.spec.wall_timeout_s = 30;
    CHECK_MSG(sandbox_run(&job, &err) == 0, "%s", err.msg);
    CHECK_MSG(job.result.reason == SANDBOX_OK, "%s: %s", job.result.message, job.errout);
    CHECK_STR(job.out, "w");
    struct stat st;
    CHECK(stat(written, &st) == 0 && st.st_uid == TRAINER_HOST_UID && st.st_gid == TRAINER_HOST_UID);
    CHECK(stat(job_dir, &st) == 0 && st.st_uid == TRAINER_HOST_UID);
    CHECK(stat(model_file, &st) == 0 && st.st_uid == 0 && (st.st_mode & 0777) == 0644);
    sandbox_job_release(&job);
    json_decref(cfg);
    unlink(written);
    unlink(model_file);
    rmdir(job_dir);
    rmdir(model_dir);
}

/* Runs `script` with sh in the sandbox `spec` describes (as the executor builds it). */
static void run_sh(struct sandbox_job *job, const struct sandbox_spec *spec, const char *script) {
    const char *argv[] = {"/bin/sh", "-c", script, NULL};
    memset(job, 0, sizeof *job);
    job->spec = *spec;
    job->spec.argv = argv;
    job->spec.wall_timeout_s = 30;
    struct whet_err err;
    CHECK_MSG(sandbox_run(job, &err) == 0, "%s", err.msg);
    job->spec.argv = NULL;
    fprintf(stderr, "  [%s] %s | out: %.200s | err: %.300s\n", sandbox_reason_name(job->result.reason),
            job->result.message, job->out, job->errout);
}

TEST(a_gpu_gangs_ranks_on_one_node_share_a_dev_shm_no_other_job_sees) {
    static const char *const peers_json = "{\"peers\": [\"127.0.0.1\"]}";
    json_t *cfg = config(NULL), *dist = json_loads(peers_json, 0, NULL);
    const char *env[8] = {"PATH=/usr/bin:/bin", "HOME=/tmp", NULL};
    trainer_sandbox_nccl_env(env, WHET_ARRAY_LEN(env));
    struct sandbox_spec rank[2], other, plain;
    const char **peers[3];
    char *shm[3];
    struct whet_err err;
    char stale[128];
    snprintf(stale, sizeof stale, "%s/gang-shm/ftjob-dead-3", dir); /* a killed executor's */
    CHECK(whet_mkdir_p(stale, &err) == 0);
    for (int i = 0; i < 3; i++) {
        struct sandbox_spec *spec = i < 2 ? &rank[i] : &other;
        trainer_sandbox_spec(spec, NULL, env, "/tmp", NULL, NULL, NULL, cfg);
        peers[i] = trainer_sandbox_gang(spec, dist, 20000, 20099);
        shm[i] = trainer_sandbox_gang_shm(spec, dir, i < 2 ? "ftjob-gang" : "ftjob-other", 1, &err);
        CHECK_MSG(shm[i] && spec->shm_dir == shm[i] && spec->allow_unix_sockets, "%s", err.msg);
    }
    trainer_sandbox_spec(&plain, NULL, env, "/tmp", NULL, NULL, NULL, cfg);
    CHECK(shm[0] && shm[1] && shm[2] && !strcmp(shm[0], shm[1]) && strcmp(shm[0], shm[2]));
    struct stat st;
    CHECK(stat(stale, &st) != 0);

    struct sandbox_job job;
    run_sh(&job, &rank[0], "echo from-rank0 > /dev/shm/nccl-abc && env | grep ^NCCL_ | sort");
    if (job.result.reason == SANDBOX_SETUP && strstr(job.result.message, "Landlock")) {
        printf("(no Landlock scope on this kernel: a GPU rank's sandbox is refused, as checked in unit_sandbox_net)\n");
    } else {
        CHECK_MSG(job.result.reason == SANDBOX_OK, "%s: %s", job.result.message, job.errout);
        CHECK_STR(job.out, "NCCL_CUMEM_ENABLE=0\nNCCL_IB_DISABLE=1\nNCCL_NVLS_ENABLE=0\nNCCL_P2P_DISABLE=1\n");
        sandbox_job_release(&job);
        run_sh(&job, &rank[1], "cat /dev/shm/nccl-abc");
        CHECK(job.result.reason == SANDBOX_OK);
        CHECK_STR(job.out, "from-rank0\n");
        sandbox_job_release(&job);
        /* Another gang has a /dev/shm of its own, empty; a job of one process has none. */
        run_sh(&job, &other, "ls -A /dev/shm; cat /dev/shm/nccl-abc 2>/dev/null || echo unseen");
        CHECK(job.result.reason == SANDBOX_OK);
        CHECK_STR(job.out, "unseen\n");
        sandbox_job_release(&job);
        run_sh(&job, &plain, "test -e /dev/shm && echo shm || echo no-shm");
        CHECK(job.result.reason == SANDBOX_OK);
        CHECK_STR(job.out, "no-shm\n");
    }
    sandbox_job_release(&job);

    /* The node's last rank of the gang removes its directory. */
    char *kept = xstrdup(shm[0]);
    trainer_sandbox_gang_shm_release(shm[0]);
    CHECK(stat(kept, &st) == 0);
    trainer_sandbox_gang_shm_release(shm[1]);
    CHECK(stat(kept, &st) != 0);
    trainer_sandbox_gang_shm_release(shm[2]);
    free(kept);
    for (int i = 0; i < 3; i++) free(peers[i]);
    char parent[128];
    snprintf(parent, sizeof parent, "%s/gang-shm", dir);
    CHECK(rmdir(parent) == 0);

    /* What does not fit is left out, the list still ends. */
    const char *small[3] = {"PATH=/usr/bin:/bin", NULL, NULL};
    trainer_sandbox_nccl_env(small, WHET_ARRAY_LEN(small));
    CHECK(small[1] && !strncmp(small[1], "NCCL_", 5) && !small[2]);
    json_decref(dist);
    json_decref(cfg);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_trainer_sandbox WHET_BINARY\n");
        return 2;
    }
    /* The sandbox shows host paths at their canonical place. */
    if (!realpath(argv[1], whet_bin)) return 2;
    snprintf(bin_dir, sizeof bin_dir, "%s", whet_bin);
    *strrchr(bin_dir, '/') = 0;
    snprintf(dir, sizeof dir, "/tmp/whet-trainer-sandbox-XXXXXX");
    if (!mkdtemp(dir) || chmod(dir, 0755) != 0) return 2;
    snprintf(grader_path, sizeof grader_path, "%s/grader.py", dir);
    static const char source[] = "def grade(sample, item):\n"
                                 "    if item.get('socket'):\n"
                                 "        import socket\n"
                                 "        socket.socket()\n"
                                 "    return 1.0 if sample['output_text'] == item['answer'] else 0.0\n";
    struct whet_err err;
    if (whet_write_file_atomic(grader_path, source, sizeof source - 1, &err) < 0) return 2;
    RUN(python_graders_are_found_at_the_top_and_inside_multi);
    RUN(a_python_grading_job_grades_in_nested_sandboxes);
    RUN(any_other_job_can_build_no_sandbox_and_dies_on_a_socket);
    RUN(a_root_executor_runs_the_trainer_as_nobody_in_its_own_job_dir);
    RUN(a_gpu_gangs_ranks_on_one_node_share_a_dev_shm_no_other_job_sees);
    unlink(grader_path);
    rmdir(dir);
    return test_summary();
}
