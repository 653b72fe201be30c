/* test_sandbox.c - the sandbox confines: hostile programs are stopped, each with the right reason.
 *
 * Every case runs sandbox_helper (a program that misbehaves on request) inside a sandbox that sees a
 * job dir (writable), a sibling "other tenant" dir (absent from its view) and the helper's own dir
 * (read-only), and judges what the helper printed and what the sandbox reported. The root fallback
 * without a user namespace runs the same confinement checks; as root the unprivileged path is run
 * too, by a child that drops to nobody first. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <stdlib.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.h"
#include "test.h"

static const char *helper;
static char helper_dir[4096], base[64], job_dir[128], other_dir[128], secret_path[160];

static void spec_defaults(struct sandbox_spec *spec) {
    static const char *writable[2], *readonly[2];
    writable[0] = job_dir;
    readonly[0] = helper_dir;
    sandbox_spec_init(spec);
    spec->writable_dirs = writable;
    spec->readonly_dirs = readonly;
    spec->wall_timeout_s = 30;
    spec->max_procs = 64;
    spec->mem_bytes = 512ull << 20;
}

/* Runs the helper with `args` (after its path) under `spec`, capturing its output. */
static struct sandbox_job run_spec(struct sandbox_spec *spec, const char *input, const char *const *args) {
    const char *argv[16] = {helper};
    for (int i = 0; args[i]; i++) argv[i + 1] = args[i];
    struct sandbox_job job;
    memset(&job, 0, sizeof job);
    job.spec = *spec;
    job.spec.argv = argv;
    job.input = input;
    job.input_len = input ? strlen(input) : 0;
    struct whet_err err;
    if (sandbox_run_many(&job, 1, &err) < 0) fprintf(stderr, "run_many: %s\n", err.msg);
    job.spec.argv = NULL;
    fprintf(stderr, "  [%s] %s | out: %.200s | err: %.200s | notes: %s\n", sandbox_reason_name(job.result.reason),
            job.result.message, job.out, job.errout, job.result.notes);
    return job;
}

static struct sandbox_job run(const char *const *args) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    return run_spec(&spec, NULL, args);
}

static int file_contains(const char *path, const char *text) {
    char buf[256] = "";
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    return strstr(buf, text) != NULL;
}

TEST(well_behaved_program_runs_and_its_output_comes_back) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    const char *args[] = {"hello", NULL};
    struct sandbox_job job = run_spec(&spec, "line one\nline two\n", args);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK(job.result.exit_code == 0);
    /* uid 1000 inside, PID 2 (init is 1), its own hostname; stdin reached it. */
    CHECK_CONTAINS(job.out, "uid=1000 gid=1000 pid=2 host=whet-sandbox");
    CHECK_CONTAINS(job.out, "echo: line two");
    /* a new network namespace: lo only, left down, and the command has no capability to raise it */
    CHECK_CONTAINS(job.out, "interfaces: lo\n");
    sandbox_job_release(&job);
}

TEST(open_files_limit) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.open_files = 32;
    struct sandbox_job job;
    memset(&job, 0, sizeof job);
    const char *argv[] = {helper, "files", NULL};
    job.spec = spec;
    job.spec.argv = argv;
    struct whet_err err;
    CHECK(sandbox_run(&job, &err) == 0);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, "opened 29 more files, then EMFILE"); /* 32 minus stdin, stdout, stderr */
    sandbox_job_release(&job);
}

TEST(openmp_threads_run_under_the_filter) {
    const char *args[] = {"omp", NULL};
    struct sandbox_job job = run(args);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, "sum=1.644933"); /* pi^2/6 to the 1e6th term */
    sandbox_job_release(&job);
}

TEST(stdin_absent_stdout_given_does_not_cross_streams) {
    /* stdin -1 (/dev/null) with stdout and stderr given: stdout must not end up on /dev/null or
     * stdin, which a careless renumbering would do. */
    struct sandbox_spec spec;
    spec_defaults(&spec);
    const char *argv[] = {helper, "hello", NULL};
    spec.argv = argv;
    int out[2], errp[2];
    CHECK(pipe2(out, O_CLOEXEC) == 0 && pipe2(errp, O_CLOEXEC) == 0);
    spec.stdout_fd = out[1];
    spec.stderr_fd = errp[1];
    struct sandbox_child child;
    struct sandbox_result res;
    struct whet_err err;
    CHECK(sandbox_spawn(&spec, &child, &err) == 0);
    close(out[1]);
    close(errp[1]);
    char buf[512] = "";
    ssize_t n = read(out[0], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    CHECK(sandbox_wait(&child, &res, &err) == 0);
    CHECK(res.reason == SANDBOX_OK);
    CHECK_CONTAINS(buf, "uid=1000");
    close(out[0]);
    close(errp[0]);
}

TEST(metric_lines_stream_to_a_caller_pipe) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    const char *argv[] = {helper, "metrics", "5", NULL};
    spec.argv = argv;
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    spec.stdout_fd = p[1];
    struct sandbox_child child;
    struct whet_err err;
    CHECK(sandbox_spawn(&spec, &child, &err) == 0);
    close(p[1]);
    char buf[4096];
    size_t len = 0;
    ssize_t n;
    while ((n = read(p[0], buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)n;
    buf[len] = 0;
    close(p[0]);
    struct sandbox_result res;
    CHECK(sandbox_wait(&child, &res, &err) == 0);
    CHECK(res.reason == SANDBOX_OK);
    CHECK_CONTAINS(buf, "{\"step\":1,\"loss\":1.000}");
    CHECK_CONTAINS(buf, "{\"step\":5,\"loss\":0.200}");
}

TEST(socket_is_refused_not_killed) {
    const char *args[] = {"socket", NULL};
    struct sandbox_job job = run(args);
    CHECK(job.result.reason == SANDBOX_OK); /* the helper exits 0 only when both sockets failed */
    CHECK_CONTAINS(job.out, "inet=EACCES unix=EACCES");
    sandbox_job_release(&job);
}

TEST(new_namespaces_are_refused) {
    const char *args[] = {"newns", NULL};
    struct sandbox_job job = run(args);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, "clone(CLONE_NEWUSER)=EPERM");
    sandbox_job_release(&job);
}

TEST(only_the_writable_dir_is_writable) {
    char inside[192], outside[192], sys_path[] = "/usr/pwned", etc_path[] = "/etc/pwned";
    snprintf(inside, sizeof inside, "%s/result.txt", job_dir);
    snprintf(outside, sizeof outside, "%s/pwned", other_dir);
    char helper_copy[4200];
    snprintf(helper_copy, sizeof helper_copy, "%s/pwned", helper_dir);
    const char *args[] = {"write", inside, outside, sys_path, etc_path, helper_copy, "/pwned", NULL};
    struct sandbox_job job = run(args);
    CHECK(job.result.reason == SANDBOX_OK);
    char expect[4300];
    snprintf(expect, sizeof expect, "%s: written", inside);
    CHECK_CONTAINS(job.out, expect);
    CHECK(file_contains(inside, "pwned"));
    /* the sibling dir is not there at all; the system and the read-only dir refuse writes */
    snprintf(expect, sizeof expect, "%s: ENOENT", outside);
    CHECK_CONTAINS(job.out, expect);
    CHECK(access(outside, F_OK) != 0);
    CHECK_CONTAINS(job.out, "/usr/pwned: EROFS");
    CHECK_CONTAINS(job.out, "/etc/pwned: EROFS");
    snprintf(expect, sizeof expect, "%s: EROFS", helper_copy);
    CHECK_CONTAINS(job.out, expect);
    CHECK_CONTAINS(job.out, "/pwned: EROFS");
    CHECK(access("/usr/pwned", F_OK) != 0);
    sandbox_job_release(&job);
}

TEST(another_tenants_dir_is_invisible) {
    const char *args[] = {"read", secret_path, NULL};
    struct sandbox_job job = run(args);
    CHECK(job.result.reason == SANDBOX_EXIT);
    CHECK_CONTAINS(job.out, "ENOENT");
    CHECK(strstr(job.out, "tenant-b-secret") == NULL);
    sandbox_job_release(&job);
    const char *shadow[] = {"read", "/etc/shadow", NULL};
    job = run(shadow);
    CHECK_CONTAINS(job.out, "/etc/shadow: ENOENT");
    sandbox_job_release(&job);
}

/* A GPU job's /dev/nvidia* nodes are bound by name; here /dev/tty stands in for one (opening it
 * without a controlling terminal fails with ENXIO, where an absent node is ENOENT). */
TEST(device_nodes_are_bound_by_name_and_only_those) {
    const char *args[] = {"read", "/dev/tty", NULL};
    struct sandbox_job job = run(args);
    CHECK_CONTAINS(job.out, "/dev/tty: ENOENT");
    sandbox_job_release(&job);
    struct sandbox_spec spec;
    spec_defaults(&spec);
    const char *nodes[] = {"tty", NULL};
    spec.device_nodes = nodes;
    job = run_spec(&spec, NULL, args);
    CHECK(access("/dev/tty", F_OK) == 0);
    CHECK(strstr(job.out, "/dev/tty: ENOENT") == NULL && strstr(job.out, "/dev/tty: ") != NULL);
    sandbox_job_release(&job);
    const char *bad[] = {"../etc/passwd", NULL};
    spec.device_nodes = bad;
    job = run_spec(&spec, NULL, args);
    CHECK(job.result.reason != SANDBOX_OK && job.result.reason != SANDBOX_EXIT);
    CHECK_CONTAINS(job.result.message, "expected a name under /dev");
    sandbox_job_release(&job);
}

TEST(fork_bomb_is_stopped_by_the_process_limit) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.max_procs = 24;
    const char *args[] = {"forkbomb", NULL};
    struct sandbox_job job = run_spec(&spec, NULL, args);
    fprintf(stderr, "  peak tasks %d, wall %.2f s\n", job.result.peak_tasks, job.result.wall_s);
    CHECK(job.result.reason == SANDBOX_PROCS);
    CHECK_CONTAINS(job.result.message, "process limit of 24");
    /* as a normal user RLIMIT_NPROC holds the tree at the limit; uid 0 is exempt from it, so there
     * init's counter kills the tree as soon as it is seen above the limit (it stops counting at 25) */
    CHECK(job.result.peak_tasks <= 25);
    if (geteuid() != 0) CHECK(job.result.peak_tasks <= 24);
    if (geteuid() == 0) CHECK_CONTAINS(job.result.notes, "RLIMIT_NPROC does not bind uid 0");
    CHECK(job.result.wall_s < 10); /* stopped by the limit, not by the 30 s wall clock */
    sandbox_job_release(&job);
}

TEST(root_caller_can_run_the_command_as_an_unprivileged_host_uid) {
    if (geteuid() != 0) {
        struct sandbox_spec spec;
        spec_defaults(&spec);
        spec.host_uid = spec.host_gid = 65534;
        struct sandbox_child child;
        struct whet_err err;
        const char *argv[] = {helper, "hello", NULL};
        spec.argv = argv;
        CHECK(sandbox_spawn(&spec, &child, &err) < 0);
        CHECK_CONTAINS(err.msg, "needs a root caller");
        return;
    }
    char own_dir[160];
    snprintf(own_dir, sizeof own_dir, "%s/tenant-c-job", base);
    mkdir(own_dir, 0755);
    CHECK(chown(own_dir, 65534, 65534) == 0);
    static const char *writable[2];
    writable[0] = own_dir;
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.writable_dirs = writable;
    spec.host_uid = spec.host_gid = 65534;
    char inside[200];
    snprintf(inside, sizeof inside, "%s/out.txt", own_dir);
    const char *write_args[] = {"write", inside, secret_path, NULL};
    struct sandbox_job job = run_spec(&spec, NULL, write_args);
    CHECK(job.result.reason == SANDBOX_OK);
    struct stat st;
    CHECK(stat(inside, &st) == 0 && st.st_uid == 65534); /* written as the host uid, not root */
    CHECK_CONTAINS(job.out, "secret.txt: ENOENT");
    sandbox_job_release(&job);
    const char *hello[] = {"hello", NULL};
    job = run_spec(&spec, NULL, hello);
    CHECK_CONTAINS(job.out, "uid=1000 gid=1000 pid=2");
    sandbox_job_release(&job);
    /* and RLIMIT_NPROC binds: the bomb is held at the limit until init kills it */
    spec.max_procs = 24;
    const char *bomb[] = {"forkbomb", NULL};
    job = run_spec(&spec, NULL, bomb);
    fprintf(stderr, "  peak tasks %d, wall %.2f s\n", job.result.peak_tasks, job.result.wall_s);
    CHECK(job.result.reason == SANDBOX_PROCS);
    CHECK(job.result.peak_tasks <= 24);
    CHECK(job.result.wall_s < 10);
    sandbox_job_release(&job);
}

TEST(allocation_loop_is_stopped_by_the_memory_limit) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.mem_bytes = 96ull << 20;
    const char *args[] = {"alloc", NULL};
    struct sandbox_job job = run_spec(&spec, NULL, args);
    CHECK(job.result.reason == SANDBOX_MEMORY);
    CHECK(job.result.max_rss_kb <= 96 * 1024);
    CHECK(job.result.wall_s < 10);
    sandbox_job_release(&job);
}

TEST(infinite_loop_is_stopped_by_the_cpu_limit) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.cpu_seconds = 1;
    const char *args[] = {"spin", NULL};
    struct sandbox_job job = run_spec(&spec, NULL, args);
    CHECK(job.result.reason == SANDBOX_CPU);
    CHECK(job.result.term_signal == SIGXCPU);
    CHECK(job.result.cpu_s > 0.5);
    sandbox_job_release(&job);
}

/* Host processes whose command line starts with `name` (the sandbox's PID namespace is nested in
 * ours, so we see its processes). */
static int host_processes_named(const char *name) {
    DIR *d = opendir("/proc");
    int count = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[sizeof e->d_name + 16];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && file_contains(path, name)) count++;
    }
    if (d) closedir(d);
    return count;
}

TEST(wall_clock_timeout_kills_the_whole_tree) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.wall_timeout_s = 1.0;
    char marker[64];
    snprintf(marker, sizeof marker, "sleep-whet-test-%d", (int)getpid());
    const char *args[] = {"sleeptree", marker + 6, NULL};
    struct sandbox_job job = run_spec(&spec, NULL, args);
    CHECK(job.result.reason == SANDBOX_TIMEOUT);
    CHECK(job.result.wall_s >= 1.0 && job.result.wall_s < 5);
    CHECK_CONTAINS(job.out, "started");
    CHECK(host_processes_named(marker) == 0); /* the daemonised grandchild died with init */
    sandbox_job_release(&job);
}

TEST(dangerous_calls_are_killed_as_seccomp_violations) {
    const char *ptrace_args[] = {"ptrace", NULL};
    struct sandbox_job job = run(ptrace_args);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK(job.result.term_signal == SIGSYS);
    CHECK(strstr(job.out, "ptrace returned") == NULL);
    sandbox_job_release(&job);
    const char *mount_args[] = {"mount", NULL};
    job = run(mount_args);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    sandbox_job_release(&job);
}

TEST(file_size_limit) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.file_bytes = 1 << 20;
    char path[192];
    snprintf(path, sizeof path, "%s/big", job_dir);
    const char *args[] = {"fsize", path, NULL};
    struct sandbox_job job = run_spec(&spec, NULL, args);
    CHECK(job.result.reason == SANDBOX_FSIZE);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size <= (1 << 20));
    sandbox_job_release(&job);
}

TEST(missing_command_is_a_setup_error) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    const char *argv[] = {"no-such-program-anywhere", NULL};
    spec.argv = argv;
    struct sandbox_child child;
    struct sandbox_result res;
    struct whet_err err;
    CHECK(sandbox_spawn(&spec, &child, &err) == 0);
    CHECK(sandbox_wait(&child, &res, &err) == 0);
    CHECK(res.reason == SANDBOX_SETUP);
    CHECK_CONTAINS(res.message, "exec no-such-program-anywhere: No such file or directory");
    /* and a writable dir that does not exist is refused before anything runs */
    const char *bad[] = {"/nonexistent/dir", NULL};
    spec.writable_dirs = bad;
    CHECK(sandbox_spawn(&spec, &child, &err) < 0);
    CHECK_CONTAINS(err.msg, "/nonexistent/dir");
}

TEST(sigterm_reaches_the_command_through_init) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    const char *argv[] = {helper, "term", NULL};
    spec.argv = argv;
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    spec.stdout_fd = p[1];
    struct sandbox_child child;
    struct sandbox_result res;
    struct whet_err err;
    CHECK(sandbox_spawn(&spec, &child, &err) == 0);
    close(p[1]);
    char buf[256] = "";
    size_t len = 0;
    ssize_t n;
    while (!strstr(buf, "ready") && (n = read(p[0], buf + len, sizeof buf - 1 - len)) > 0) buf[len += (size_t)n] = 0;
    CHECK(sandbox_signal(&child, SIGKILL) < 0 && errno == EINVAL); /* only the forwarded ones */
    CHECK(sandbox_signal(&child, SIGTERM) == 0);
    while ((n = read(p[0], buf + len, sizeof buf - 1 - len)) > 0) buf[len += (size_t)n] = 0;
    close(p[0]);
    CHECK(sandbox_wait(&child, &res, &err) == 0);
    CHECK(res.reason == SANDBOX_OK); /* it handled SIGTERM and exited 0 */
    CHECK_CONTAINS(buf, "got SIGTERM, stopping cleanly");
}

TEST(kill_ends_a_running_sandbox) {
    struct sandbox_spec spec;
    spec_defaults(&spec);
    const char *argv[] = {helper, "spin", NULL};
    spec.argv = argv;
    struct sandbox_child child;
    struct sandbox_result res;
    struct whet_err err;
    CHECK(sandbox_spawn(&spec, &child, &err) == 0);
    usleep(200 * 1000);
    sandbox_kill(&child);
    CHECK(sandbox_wait(&child, &res, &err) == 0);
    CHECK(res.reason == SANDBOX_KILLED);
    CHECK(res.wall_s < 5);
}

static void write_small(const char *dir, const char *name, const char *text) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && write(fd, text, strlen(text)) < 0) perror(path);
    if (fd >= 0) close(fd);
}

TEST(cgroup_plumbing_with_a_delegated_parent) {
    /* This host offers no cgroup v2 controllers, so the kernel's enforcement cannot be shown here.
     * What can: given a parent that offers memory and pids (a plain directory standing in for a
     * delegated one), the sandbox makes its own group, writes the limits, moves init into it, leaves
     * RLIMIT_AS off (the cgroup holds memory), and reports no fallback. */
    char parent[160];
    snprintf(parent, sizeof parent, "%s/delegated", base);
    mkdir(parent, 0755);
    write_small(parent, "cgroup.controllers", "cpu memory pids\n");
    write_small(parent, "cgroup.subtree_control", "memory pids\n");
    setenv("WHET_SANDBOX_CGROUP", parent, 1);
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.mem_bytes = 300ull << 20;
    spec.max_procs = 20;
    const char *args[] = {"limits", NULL};
    struct sandbox_job job = run_spec(&spec, NULL, args);
    unsetenv("WHET_SANDBOX_CGROUP");
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, "as=unlimited nproc=20");
    CHECK(strstr(job.result.notes, "rlimits only") == NULL);
    DIR *d = opendir(parent);
    struct dirent *e;
    int groups = 0;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "whet-sandbox-", 13)) continue;
        groups++;
        char group[sizeof parent + sizeof e->d_name + 2], path[sizeof group + 32];
        snprintf(group, sizeof group, "%s/%s", parent, e->d_name);
        snprintf(path, sizeof path, "%s/memory.max", group);
        CHECK(file_contains(path, "314572800"));
        snprintf(path, sizeof path, "%s/pids.max", group);
        CHECK(file_contains(path, "20"));
        snprintf(path, sizeof path, "%s/cgroup.procs", group);
        struct stat st;
        CHECK(stat(path, &st) == 0 && st.st_size > 0); /* init's pid was written */
    }
    if (d) closedir(d);
    CHECK(groups == 1);
    sandbox_job_release(&job);
}

TEST(memory_limit_by_cgroup_where_the_host_delegates_it) {
    /* WHET_SANDBOX_CGROUP=self: the sandbox may move this process into a leaf of its own cgroup to
     * enable controllers for sibling sandbox groups. Where the host offers a memory controller the
     * allocation loop must die by the cgroup's OOM kill; where it does not (this build machine), the
     * note must say so and RLIMIT_AS must have held it instead. */
    setenv("WHET_SANDBOX_CGROUP", "self", 1);
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.mem_bytes = 96ull << 20;
    const char *args[] = {"alloc", NULL};
    struct sandbox_job job = run_spec(&spec, NULL, args);
    unsetenv("WHET_SANDBOX_CGROUP");
    CHECK(job.result.reason == SANDBOX_MEMORY);
    if (strstr(job.result.notes, "rlimits only") || strstr(job.result.notes, "memory by RLIMIT_AS")) {
        fprintf(stderr, "  no delegated memory controller here: RLIMIT_AS held the loop\n");
        CHECK(strstr(job.result.message, "cgroup") == NULL);
    } else {
        fprintf(stderr, "  memory controller delegated: the cgroup held the loop\n");
        CHECK_CONTAINS(job.result.message, "cgroup OOM");
        CHECK(job.result.term_signal == SIGKILL);
    }
    CHECK(job.result.max_rss_kb <= 100 * 1024);
    sandbox_job_release(&job);
}

TEST(fallback_without_user_namespace_still_confines) {
    if (geteuid() != 0) {
        /* Without root there is no fallback: the sandbox must refuse rather than run unconfined. */
        struct sandbox_spec spec;
        spec_defaults(&spec);
        spec.no_userns = 1;
        const char *args[] = {"hello", NULL};
        struct sandbox_job job = run_spec(&spec, NULL, args);
        CHECK(job.result.reason == SANDBOX_SETUP);
        sandbox_job_release(&job);
        return;
    }
    struct sandbox_spec spec;
    spec_defaults(&spec);
    spec.no_userns = 1;
    spec.max_procs = 24;
    const char *hello[] = {"hello", NULL};
    struct sandbox_job job = run_spec(&spec, NULL, hello);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, "pid=2 host=whet-sandbox");
    CHECK_CONTAINS(job.result.notes, "user namespace disabled");
    sandbox_job_release(&job);
    char outside[192];
    snprintf(outside, sizeof outside, "%s/pwned", other_dir);
    const char *write_args[] = {"write", outside, "/usr/pwned", NULL};
    job = run_spec(&spec, NULL, write_args);
    CHECK_CONTAINS(job.out, "pwned: ENOENT");
    CHECK_CONTAINS(job.out, "/usr/pwned: EROFS");
    sandbox_job_release(&job);
    const char *sock[] = {"socket", NULL};
    job = run_spec(&spec, NULL, sock);
    CHECK_CONTAINS(job.out, "inet=EACCES");
    sandbox_job_release(&job);
    const char *mnt[] = {"mount", NULL};
    job = run_spec(&spec, NULL, mnt);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    sandbox_job_release(&job);
    /* RLIMIT_NPROC does not bind uid 0 outside a user namespace: init's task counter stops it. */
    const char *bomb[] = {"forkbomb", NULL};
    job = run_spec(&spec, NULL, bomb);
    fprintf(stderr, "  peak tasks %d, wall %.2f s\n", job.result.peak_tasks, job.result.wall_s);
    CHECK(job.result.reason == SANDBOX_PROCS);
    CHECK(job.result.wall_s < 10);
    sandbox_job_release(&job);
    /* with a host uid the fallback still leaves root behind */
    spec.host_uid = spec.host_gid = 65534;
    job = run_spec(&spec, NULL, hello);
    CHECK_CONTAINS(job.out, "uid=65534 gid=65534 pid=2");
    sandbox_job_release(&job);
}

TEST(unprivileged_caller_gets_the_same_sandbox) {
    if (geteuid() != 0) {
        /* Every other test already ran as this unprivileged user. */
        CHECK(geteuid() != 0);
        return;
    }
    chmod(base, 0755);
    chmod(job_dir, 0777);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0) _exit(10);
        /* (no prctl(PR_SET_DUMPABLE) here: the sandbox must cope with a caller made non-dumpable) */
        struct sandbox_spec spec;
        spec_defaults(&spec);
        const char *args[] = {"hello", NULL};
        struct sandbox_job job = run_spec(&spec, NULL, args);
        int ok = job.result.reason == SANDBOX_OK && strstr(job.out, "uid=1000 gid=1000 pid=2") != NULL;
        const char *sock[] = {"socket", NULL};
        struct sandbox_job job2 = run_spec(&spec, NULL, sock);
        ok = ok && strstr(job2.out, "inet=EACCES") != NULL;
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: unit_sandbox PATH-OF-sandbox_helper\n");
        return 2;
    }
    helper = argv[1];
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", helper);
    snprintf(helper_dir, sizeof helper_dir, "%s", dirname(copy));
    snprintf(base, sizeof base, "/tmp/whet-sandbox-test-XXXXXX");
    if (!mkdtemp(base)) return 2;
    snprintf(job_dir, sizeof job_dir, "%s/tenant-a-job", base);
    snprintf(other_dir, sizeof other_dir, "%s/tenant-b", base);
    snprintf(secret_path, sizeof secret_path, "%s/secret.txt", other_dir);
    mkdir(job_dir, 0755);
    mkdir(other_dir, 0755);
    int fd = open(secret_path, O_WRONLY | O_CREAT, 0644);
    if (fd < 0 || write(fd, "tenant-b-secret\n", 16) != 16) return 2;
    close(fd);
    char *probe = sandbox_probe();
    fprintf(stderr, "running as uid %d\n%s", (int)geteuid(), probe);
    free(probe);

    RUN(well_behaved_program_runs_and_its_output_comes_back);
    RUN(openmp_threads_run_under_the_filter);
    RUN(open_files_limit);
    RUN(stdin_absent_stdout_given_does_not_cross_streams);
    RUN(metric_lines_stream_to_a_caller_pipe);
    RUN(socket_is_refused_not_killed);
    RUN(new_namespaces_are_refused);
    RUN(only_the_writable_dir_is_writable);
    RUN(another_tenants_dir_is_invisible);
    RUN(device_nodes_are_bound_by_name_and_only_those);
    RUN(fork_bomb_is_stopped_by_the_process_limit);
    RUN(root_caller_can_run_the_command_as_an_unprivileged_host_uid);
    RUN(allocation_loop_is_stopped_by_the_memory_limit);
    RUN(infinite_loop_is_stopped_by_the_cpu_limit);
    RUN(wall_clock_timeout_kills_the_whole_tree);
    RUN(dangerous_calls_are_killed_as_seccomp_violations);
    RUN(file_size_limit);
    RUN(missing_command_is_a_setup_error);
    RUN(sigterm_reaches_the_command_through_init);
    RUN(kill_ends_a_running_sandbox);
    RUN(cgroup_plumbing_with_a_delegated_parent);
    RUN(memory_limit_by_cgroup_where_the_host_delegates_it);
    RUN(fallback_without_user_namespace_still_confines);
    RUN(unprivileged_caller_gets_the_same_sandbox);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    return test_summary();
}
