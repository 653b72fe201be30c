/* Bench driver for bench.sh: times objstore_put_file (SHA-256 of the file, then a multipart upload
 * with parallel parts) of one local file to an object store URL and prints the wall-clock seconds
 * taken and the CPU seconds (user + system) this process spent.
 *
 *   upload URL KEY FILE PART_MIB THREADS */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "objstore.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: upload URL KEY FILE PART_MIB THREADS\n");
        return 2;
    }
    struct objstore *store;
    struct whet_err err;
    if (objstore_open(argv[1], &store, &err) != 0) {
        fprintf(stderr, "upload: %s\n", err.msg);
        return 1;
    }
    objstore_set_multipart(store, (size_t)atoi(argv[4]) << 20, atoi(argv[5]));
    double start = whet_now_mono();
    int rc = objstore_put_file(store, argv[2], argv[3], &err);
    double seconds = whet_now_mono() - start;
    if (rc != 0) fprintf(stderr, "upload: %s\n", err.msg);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                 ru.ru_stime.tv_usec / 1e6;
    if (rc == 0) printf("%.3f %.3f\n", seconds, cpu);
    objstore_close(store);
    return rc != 0;
}
