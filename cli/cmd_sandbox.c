/* cmd_sandbox.c - `whet sandbox`: run a command in the executor's sandbox, grade with a python grader,
 * or probe the host.
 *
 * For operators checking what a job would see (`whet sandbox run -- ls /`), why one was killed,
 * what a tenant's python grader answers (`whet sandbox grade`), or which fallbacks this host forces
 * (`whet sandbox probe`). The command's stdin, stdout and stderr are
 * the terminal's; the verdict goes to stderr as one line. The logic lives in executor/sandbox. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "json_text.h"
#include "pygrader.h"
#include "sandbox.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet sandbox run [OPTIONS] -- CMD [ARGS...]\n"
            "       whet sandbox grade --source FILE [GRADE OPTIONS] < PAIRS.jsonl\n"
            "       whet sandbox probe\n\n"
            "Runs CMD confined as `whet train` and python graders are: new user, PID, mount, network, IPC and\n"
            "UTS namespaces, a seccomp allow-list, rlimits (cgroup v2 limits where delegated), a read-only\n"
            "minimal system view, a tmpfs /tmp, and only the listed directories visible.\n\n"
            "options:\n"
            "  --mem MB          memory limit (cgroup memory.max, else RLIMIT_AS per process)\n"
            "  --cpu S           CPU-time limit per process, seconds\n"
            "  --wall S          wall-clock timeout, seconds (fractions allowed); the whole tree is killed\n"
            "  --procs N         process/thread limit (RLIMIT_NPROC, cgroup pids.max)\n"
            "  --fsize MB        largest file the command may write\n"
            "  --files N         open file limit (default 256)\n"
            "  --tmp MB          size of the tmpfs /tmp (default 64)\n"
            "  --writable DIR    make DIR visible and writable (repeatable; the first is the working dir)\n"
            "  --readonly DIR    make DIR visible read-only (repeatable)\n"
            "  --workdir DIR     working directory inside\n"
            "  --env K=V         environment variable (repeatable; default PATH, HOME=/tmp, LANG)\n"
            "  --network         keep the host network (debugging only)\n"
            "  --listen ADDR     a server's network: the command may bind numeric ADDR (any port) and\n"
            "                    nothing else; connections to it are not filtered; any other socket call\n"
            "                    ends the sandbox\n"
            "  --connect ADDR:PORT  with --listen: the command may also connect there (repeatable)\n"
            "  --peer ADDR       a gang rank's network: the command may bind and connect TCP to this numeric\n"
            "                    address (repeatable; the gang's nodes) on the ports of --peer-ports\n"
            "  --peer-ports LO-HI  the gang's ports (default 29500-29599)\n"
            "  --unix-sockets    with --peer, a GPU rank's NCCL: path-named unix sockets allowed (Linux 6.12+)\n"
            "  --shm DIR         bind host DIR writable at /dev/shm (a GPU gang's ranks on one node share one)\n"
            "  --device NAME     bind /dev/NAME read-write (repeatable; a GPU job's nvidiactl, nvidia0, ...)\n"
            "  --as-uid UID[:GID] root only: run the command as this host uid (e.g. 65534); writable dirs\n"
            "                    must be writable by it\n"
            "  --no-userns       run without a user namespace (root only; the fallback path)\n"
            "  --nested          let the command build sandboxes of its own (whet train with python graders)\n"
            "  -h, --help        this help\n\n"
            "SIGINT, SIGTERM and SIGHUP are passed on to the command.\n"
            "exit status: the command's; 128+N when killed by signal N; 124 on the wall-clock timeout;\n"
            "125 when the sandbox could not be set up.\n\n"
            "grade: runs an OpenAI python grader (FILE defines grade(sample, item)) on each stdin line\n"
            "{\"sample\": {...}, \"item\": {...}} and prints one line per pair, {\"score\": X} or\n"
            "{\"score\": 0, \"error\": \"...\"}, in order.\n"
            "  --source FILE     the grader's python source (required)\n"
            "  --parallel N      sandboxes at once (default 4)\n"
            "  --batch N         pairs per sandbox (default: spread over --parallel)\n"
            "  --timeout S       per grade() call, seconds (default 5)\n"
            "  --mem MB          per sandbox (default 512)\n"
            "  --procs N         per sandbox (default 16)\n");
}

/* Ctrl-C or a SIGTERM to `whet sandbox run` is passed on to the command (which sits in its own
 * session, away from the terminal), through the sandbox's init. */
static volatile pid_t running_init = -1;

static void forward_signal(int sig) {
    if (running_init > 0) kill(running_init, sig);
}

static void push(const char ***list, size_t *n, const char *value) {
    *list = realloc(*list, (*n + 2) * sizeof(**list));
    if (!*list) abort();
    (*list)[(*n)++] = value;
    (*list)[*n] = NULL;
}

static int sandbox_run_cmd(int argc, char **argv) {
    static const struct option options[] = {
        {"mem", required_argument, 0, 'm'},     {"cpu", required_argument, 0, 'c'},
        {"wall", required_argument, 0, 'w'},    {"procs", required_argument, 0, 'p'},
        {"fsize", required_argument, 0, 'f'},   {"files", required_argument, 0, 'n'},
        {"tmp", required_argument, 0, 't'},     {"writable", required_argument, 0, 'W'},
        {"readonly", required_argument, 0, 'R'}, {"workdir", required_argument, 0, 'C'},
        {"env", required_argument, 0, 'e'},     {"network", no_argument, 0, 'N'},
        {"no-userns", no_argument, 0, 'U'},     {"as-uid", required_argument, 0, 'u'},
        {"nested", no_argument, 0, 'X'},       {"listen", required_argument, 0, 'L'},
        {"connect", required_argument, 0, 'T'},  {"peer", required_argument, 0, 'P'},
        {"peer-ports", required_argument, 0, 'r'}, {"unix-sockets", no_argument, 0, 'S'},
        {"shm", required_argument, 0, 's'},     {"device", required_argument, 0, 'D'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    struct sandbox_spec spec;
    sandbox_spec_init(&spec);
    const char **writable = NULL, **readonly = NULL, **env = NULL, **connect_to = NULL, **peers = NULL,
               **devices = NULL;
    size_t n_writable = 0, n_readonly = 0, n_env = 0, n_connect = 0, n_peers = 0, n_devices = 0;
    spec.peer_port_lo = 29500, spec.peer_port_hi = 29599;
    const char *bad = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "+h", options, NULL)) != -1) {
        switch (opt) {
        case 'm': spec.mem_bytes = strtoull(optarg, NULL, 10) << 20; break;
        case 'c': spec.cpu_seconds = strtoull(optarg, NULL, 10); break;
        case 'w': spec.wall_timeout_s = strtod(optarg, NULL); break;
        case 'p': spec.max_procs = atoi(optarg); break;
        case 'f': spec.file_bytes = strtoull(optarg, NULL, 10) << 20; break;
        case 'n': spec.open_files = atoi(optarg); break;
        case 't': spec.tmp_bytes = strtoull(optarg, NULL, 10) << 20; break;
        case 'W': push(&writable, &n_writable, optarg); break;
        case 'R': push(&readonly, &n_readonly, optarg); break;
        case 'C': spec.workdir = optarg; break;
        case 'e': push(&env, &n_env, optarg); break;
        case 'N': spec.allow_network = 1; break;
        case 'U': spec.no_userns = 1; break;
        case 'X': spec.allow_nested = 1; break;
        case 'L': spec.listen_host = optarg; break;
        case 'T': push(&connect_to, &n_connect, optarg); break;
        case 'P': push(&peers, &n_peers, optarg); break;
        case 'S': spec.allow_unix_sockets = 1; break;
        case 's': spec.shm_dir = optarg; break;
        case 'D': push(&devices, &n_devices, optarg); break;
        case 'r':
            if (sscanf(optarg, "%d-%d", &spec.peer_port_lo, &spec.peer_port_hi) != 2 || spec.peer_port_lo < 1 ||
                spec.peer_port_hi > 65535 || spec.peer_port_lo > spec.peer_port_hi)
                bad = "whet sandbox run: --peer-ports takes LO-HI (1 <= LO <= HI <= 65535)\n";
            break;
        case 'u': {
            char *colon = strchr(optarg, ':');
            spec.host_uid = atoi(optarg);
            spec.host_gid = colon ? atoi(colon + 1) : spec.host_uid;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!bad && optind >= argc)
        bad = "whet sandbox run: no command given\nhint: whet sandbox run [OPTIONS] -- CMD [ARGS...]\n";
    if (!bad && connect_to && !spec.listen_host)
        bad = "whet sandbox run: --connect needs --listen (a server's network)\n"
              "hint: whet sandbox run --listen ADDR --connect ADDR:PORT -- CMD\n";
    if (!bad && spec.allow_unix_sockets && !peers)
        bad = "whet sandbox run: --unix-sockets needs --peer (a GPU gang rank's network)\n"
              "hint: whet sandbox run --peer 127.0.0.1 --unix-sockets --shm DIR -- CMD\n";
    if (bad) {
        fputs(bad, stderr);
        free(writable);
        free(readonly);
        free(env);
        free(connect_to);
        free(peers);
        free(devices);
        return 2;
    }
    /* a server's or a gang's network is checked call by call by init, which needs the calls sent to it */
    spec.kill_on_network = spec.listen_host != NULL || peers != NULL;
    spec.connect_to = connect_to;
    spec.peer_hosts = peers;
    spec.device_nodes = devices;
    spec.argv = (const char *const *)(argv + optind);
    spec.writable_dirs = writable;
    spec.readonly_dirs = readonly;
    spec.env = env;
    spec.stdin_fd = 0;
    spec.stdout_fd = 1;
    spec.stderr_fd = 2;
    struct sandbox_child child;
    struct sandbox_result res;
    struct whet_err err;
    int code;
    int spawned = sandbox_spawn(&spec, &child, &err) == 0;
    if (spawned) {
        running_init = child.pid;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = forward_signal;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
    }
    if (!spawned || sandbox_wait(&child, &res, &err) < 0) {
        whet_err_report("whet sandbox", &err);
        code = 125;
    } else {
        fprintf(stderr, "whet sandbox: %s: %s (wall %.2f s, cpu %.2f s, peak rss %.1f MiB%s%s)\n",
                sandbox_reason_name(res.reason), res.message, res.wall_s, res.cpu_s, res.max_rss_kb / 1024.0,
                res.notes[0] ? "; " : "", res.notes);
        if (res.reason == SANDBOX_SETUP) code = 125;
        else if (res.reason == SANDBOX_TIMEOUT) code = 124;
        else if (res.term_signal) code = 128 + res.term_signal;
        else code = res.exit_code;
    }
    free(writable);
    free(readonly);
    free(env);
    free(connect_to);
    free(peers);
    free(devices);
    return code;
}

static int sandbox_grade_cmd(int argc, char **argv) {
    static const struct option options[] = {
        {"source", required_argument, 0, 's'}, {"parallel", required_argument, 0, 'p'},
        {"batch", required_argument, 0, 'b'},  {"timeout", required_argument, 0, 't'},
        {"mem", required_argument, 0, 'm'},    {"procs", required_argument, 0, 'n'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    struct pygrader_opts opts;
    pygrader_opts_init(&opts);
    const char *source_path = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 's': source_path = optarg; break;
        case 'p': opts.parallel = atoi(optarg); break;
        case 'b': opts.batch_size = strtoull(optarg, NULL, 10); break;
        case 't': opts.sample_timeout_s = strtod(optarg, NULL); break;
        case 'm': opts.mem_bytes = strtoull(optarg, NULL, 10) << 20; break;
        case 'n': opts.max_procs = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!source_path) {
        fprintf(stderr, "whet sandbox grade: --source is required\n");
        return 2;
    }
    struct whet_err err;
    char *source = NULL;
    if (whet_read_file(source_path, 1 << 20, &source, NULL, &err) < 0) {
        whet_err_report("whet sandbox grade", &err);
        return 1;
    }
    json_t **samples = NULL, **items = NULL;
    size_t n = 0, cap = 0;
    char line[1 << 16];
    int rc = 0;
    for (size_t lineno = 1; fgets(line, sizeof line, stdin); lineno++) {
        json_error_t jerr;
        json_t *pair = json_loads(line, 0, &jerr);
        if (!json_is_object(pair)) {
            fprintf(stderr, "whet sandbox grade: stdin: line %zu: expected {\"sample\": ..., \"item\": ...}: %s\n",
                    lineno, jerr.text);
            json_decref(pair);
            rc = 1;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            samples = realloc(samples, cap * sizeof *samples);
            items = realloc(items, cap * sizeof *items);
            if (!samples || !items) abort();
        }
        samples[n] = json_incref(json_object_get(pair, "sample"));
        items[n] = json_incref(json_object_get(pair, "item"));
        n++;
        json_decref(pair);
    }
    struct pygrader_score *scores = calloc(n ? n : 1, sizeof *scores);
    if (!scores) abort();
    if (rc == 0 && pygrader_run(&opts, source, samples, items, n, scores, &err) < 0) {
        whet_err_report("whet sandbox grade", &err);
        rc = 1;
    } else if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            json_t *out = json_pack("{s:f}", "score", scores[i].score);
            if (scores[i].error) json_object_set_new(out, "error", json_string(scores[i].error));
            char *text = whet_json_compact(out, NULL);
            printf("%s\n", text);
            free(text);
            json_decref(out);
        }
        pygrader_scores_free(scores, n);
    }
    for (size_t i = 0; i < n; i++) {
        json_decref(samples[i]);
        json_decref(items[i]);
    }
    free(samples);
    free(items);
    free(scores);
    free(source);
    return rc;
}

static int cmd_sandbox(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "run")) return sandbox_run_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "grade")) return sandbox_grade_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "probe")) {
        char *text = sandbox_probe();
        fputs(text, stdout);
        int ok = strncmp(text, "sandbox: working", 16) == 0;
        free(text);
        return ok ? 0 : 1;
    }
    fprintf(stderr, "whet sandbox: unknown subcommand \"%s\"\nhint: run `whet sandbox --help`\n", argv[1]);
    return 2;
}
WHET_COMMAND("sandbox", cmd_sandbox, "run a command in the job sandbox (for operators)")
