/* Bench driver for crypt.sh: the throughput cost of encryption at rest (objstore_encrypted) against the
 * plain path, in the same process and the same run, on one store URL. Each round times, plain and then
 * sealed (the order alternates between rounds), four operations on a local file of SIZE MiB:
 *   upload    objstore_put_file                the gateway's completed uploads
 *   ckpt_up   objstore_put_dir of a checkpoint  what the executor streams after each checkpoint
 *   ckpt_get  objstore_get_dir of it            resuming, or a model worker fetching an adapter
 *   stream    objstore_reader in 1 MiB chunks   the gateway's checkpoint and file downloads
 * and prints one line per operation: the median MiB/s of each path and sealed / plain.
 *
 *   crypt URL FILE ROUNDS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crypto.h"
#include "objstore.h"

enum { OP_UPLOAD, OP_CKPT_UP, OP_CKPT_GET, OP_STREAM, N_OPS };
static const char *op_names[N_OPS] = {"upload", "ckpt_up", "ckpt_get", "stream"};

static void die(const char *what, const struct whet_err *err) {
    fprintf(stderr, "crypt: %s: %s\n", what, err->msg);
    exit(1);
}

/* Seconds one operation took on `store`; keys and dirs are per mode and round so nothing is skipped. */
static double run_op(struct objstore *store, int op, const char *file, const char *ckpt_dir, const char *tag) {
    struct whet_err err;
    char key[128], out[512];
    snprintf(key, sizeof key, "bench/%s", tag);
    double start = whet_now_mono();
    if (op == OP_UPLOAD) {
        if (objstore_put_file(store, key, file, &err) != 0) die("upload", &err);
    } else if (op == OP_CKPT_UP) {
        if (objstore_put_dir(store, key, ckpt_dir, &err) != 0) die("checkpoint upload", &err);
    } else if (op == OP_CKPT_GET) {
        snprintf(out, sizeof out, "%s.get-%s", ckpt_dir, tag);
        for (char *p = out + strlen(ckpt_dir); *p; p++)
            if (*p == '/') *p = '_';
        if (objstore_get_dir(store, key, out, &err) != 0) die("checkpoint download", &err);
        whet_rm_rf(out);
    } else {
        struct objstore_reader *rd;
        if (objstore_reader_open(store, key, NULL, &rd, NULL, &err) != 0) die("reader", &err);
        if (strncmp(objstore_url(store), "s3://", 5) == 0) objstore_reader_read_ahead(rd, 1 << 20);
        char *buf = xmalloc(1 << 20);
        size_t n;
        do {
            if (objstore_reader_next(rd, buf, 1 << 20, &n, &err) != 0) die("stream", &err);
        } while (n);
        free(buf);
        objstore_reader_close(rd);
    }
    return whet_now_mono() - start;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: crypt URL FILE ROUNDS\n");
        return 2;
    }
    const char *file = argv[2];
    int rounds = atoi(argv[3]);
    if (rounds < 1 || rounds > 50) rounds = 3;
    struct stat st;
    if (stat(file, &st) != 0) return 1;
    double mib = (double)st.st_size / (1 << 20);
    struct whet_err err;
    struct objstore *plain;
    if (objstore_open(argv[1], &plain, &err) != 0) die("open", &err);
    struct whet_data_key key = {.id = 1};
    whet_random_bytes(key.key, sizeof key.key);
    struct objstore *sealed = objstore_encrypted(plain, &key);
    /* The checkpoint: the file as its weights plus a small config, in a dir of its own. */
    char *ckpt = xasprintf("%s.ckpt", file), *weights = xasprintf("%s.ckpt/adapter_model.safetensors", file);
    if (whet_mkdir_p(ckpt, &err) != 0 || whet_write_file_in(ckpt, "adapter_config.json", "{\"r\":16}", 8, &err) != 0)
        die("checkpoint dir", &err);
    if (link(file, weights) != 0) { /* another file system: a copy */
        char *data;
        size_t len;
        if (whet_read_file(file, (size_t)1 << 34, &data, &len, &err) != 0 ||
            whet_write_file_in(ckpt, "adapter_model.safetensors", data, len, &err) != 0)
            die("checkpoint weights", &err);
        free(data);
    }
    double *secs = xcalloc((size_t)rounds * N_OPS * 2, sizeof *secs);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int sealed_turn = (r + k) % 2; /* alternate which path goes first */
            struct objstore *s = sealed_turn ? sealed : plain;
            char tag[64];
            snprintf(tag, sizeof tag, "%s-%d", sealed_turn ? "sealed" : "plain", r);
            for (int op = 0; op < N_OPS; op++) {
                char optag[96];
                /* the stream reads what the upload wrote; the checkpoint download what ckpt_up wrote */
                snprintf(optag, sizeof optag, "%s/%s", tag, op == OP_STREAM ? "upload" : op == OP_CKPT_GET ? "ckpt_up" : op_names[op]);
                secs[((size_t)r * N_OPS + op) * 2 + sealed_turn] = run_op(s, op, file, ckpt, optag);
            }
            char k2[160];
            snprintf(k2, sizeof k2, "bench/%s/upload", tag);
            objstore_delete(plain, k2, &err);
            snprintf(k2, sizeof k2, "bench/%s/ckpt_up", tag);
            objstore_delete_dir(plain, k2, &err);
        }
    }
    printf("%-9s %12s %12s %8s\n", "op", "plain MiB/s", "sealed MiB/s", "ratio");
    for (int op = 0; op < N_OPS; op++) {
        double med[2];
        for (int m = 0; m < 2; m++) {
            double *v = xcalloc((size_t)rounds, sizeof *v);
            for (int r = 0; r < rounds; r++) v[r] = secs[((size_t)r * N_OPS + op) * 2 + m];
            qsort(v, (size_t)rounds, sizeof *v, cmp_double);
            med[m] = mib / v[rounds / 2];
            free(v);
        }
        printf("%-9s %12.1f %12.1f %8.2f\n", op_names[op], med[0], med[1], med[1] / med[0]);
    }
    whet_rm_rf(ckpt);
    free(ckpt);
    free(weights);
    free(secs);
    objstore_close(sealed);
    objstore_close(plain);
    return 0;
}
