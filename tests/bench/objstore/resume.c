/* Bench driver for resume.sh: an upload of FILE that crashes part-way, then the upload that finishes
 * it. A child process runs objstore_put_file and SIGKILLs itself from the progress callback once
 * FRACTION of the file is stored; the parent then uploads the same file again and prints the
 * wall-clock seconds that second upload took, the request bytes it sent (libcurl's count) and the
 * bytes it took over from the crashed one. FRACTION 0 skips the crash: a fresh upload, the peer.
 *
 *   resume URL KEY FILE PART_MIB THREADS FRACTION */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "objstore.h"

struct progress {
    uint64_t kill_at; /* 0: never */
    uint64_t reused;
};

static void on_progress(void *ctx, const char *key, uint64_t done, uint64_t reused, uint64_t total) {
    (void)key;
    (void)total;
    struct progress *p = ctx;
    p->reused = reused;
    if (p->kill_at && done >= p->kill_at) raise(SIGKILL);
}

static struct objstore *open_store(const char *url, const char *part_mib, const char *threads) {
    struct objstore *store;
    struct whet_err err;
    if (objstore_open(url, &store, &err) != 0) {
        fprintf(stderr, "resume: %s\n", err.msg);
        exit(1);
    }
    objstore_set_multipart(store, (size_t)atoi(part_mib) << 20, atoi(threads));
    return store;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: resume URL KEY FILE PART_MIB THREADS FRACTION\n");
        return 2;
    }
    struct stat st;
    if (stat(argv[3], &st) != 0) {
        perror(argv[3]);
        return 1;
    }
    double fraction = atof(argv[6]);
    struct whet_err err;
    if (fraction > 0) {
        pid_t pid = fork();
        if (pid == 0) {
            struct objstore *store = open_store(argv[1], argv[4], argv[5]);
            struct progress p = {.kill_at = (uint64_t)(fraction * (double)st.st_size)};
            objstore_set_progress(store, on_progress, &p);
            objstore_put_file(store, argv[2], argv[3], &err);
            _exit(3); /* finished without crashing: the fraction was too high */
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFSIGNALED(status)) {
            fprintf(stderr, "resume: the first upload did not crash\n");
            return 1;
        }
    }
    struct objstore *store = open_store(argv[1], argv[4], argv[5]);
    struct progress p = {0};
    objstore_set_progress(store, on_progress, &p);
    double start = whet_now_mono();
    int rc = objstore_put_file(store, argv[2], argv[3], &err);
    double seconds = whet_now_mono() - start;
    if (rc != 0) fprintf(stderr, "resume: %s\n", err.msg);
    else
        printf("%.3f %llu %llu\n", seconds, (unsigned long long)objstore_bytes_sent(store),
               (unsigned long long)p.reused);
    objstore_close(store);
    return rc != 0;
}
