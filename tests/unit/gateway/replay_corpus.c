/* replay_corpus.c - runs the gateway fuzz target's entry point over every file of its seed corpus in a
 * normal (non-fuzzer) build, so the suite exercises the fuzz harness and its invariants without clang. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *dir = opendir(argv[1]);
    if (!dir) {
        perror(argv[1]);
        return 1;
    }
    int files = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char *path = xasprintf("%s/%s", argv[1], e->d_name);
        char *data;
        size_t len;
        struct whet_err err;
        if (whet_read_file(path, 1 << 20, &data, &len, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        LLVMFuzzerTestOneInput((const uint8_t *)data, len);
        free(data);
        free(path);
        files++;
    }
    closedir(dir);
    printf("%d corpus inputs replayed\n", files);
    return files > 0 ? 0 : 1;
}
