/* The client half of the SigV4 check (sigv4_check.py): drives the real s3:// backend, and so libcurl's
 * CURLOPT_AWS_SIGV4 signer, against the recording fake S3 server the script runs, with fixed keys,
 * region, session token and time. It prints what it got back so the script can check the parsing too:
 *
 *   sigv4_client ENDPOINT LOCAL_FILE
 *
 * Requests, in order: a PUT with metadata and an awkward key, a multipart upload of LOCAL_FILE in
 * 64 KiB parts by 3 threads (create with "uploads=", parts with partNumber/uploadId, complete), a
 * ListObjectsV2 with an encoded prefix, a HEAD, a ranged GET and a DELETE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "objstore.h"

/* libcurl stamps each request with time(); this program's own definition takes precedence over
 * libc's for libcurl too (the linker exports it because libcurl refers to it), so every request is
 * signed at 2013-05-24T00:00:00Z, the date of AWS's SigV4 examples. Nothing else here needs a clock. */
#define FIXED_TIME ((time_t)1369353600)

time_t time(time_t *out) {
    if (out) *out = FIXED_TIME;
    return FIXED_TIME;
}

static int print_key(void *ctx, const char *key, uint64_t size) {
    printf("list %s %llu\n", key, (unsigned long long)size);
    return 0;
}

static int print_chunk(void *ctx, const void *chunk, size_t len) {
    printf("range ");
    for (size_t i = 0; i < len; i++) printf("%02x", ((const unsigned char *)chunk)[i]);
    printf("\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: sigv4_client ENDPOINT LOCAL_FILE\n");
        return 2;
    }
    setenv("WHET_S3_ENDPOINT", argv[1], 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", 1);
    setenv("AWS_REGION", "eu-central-1", 1);
    setenv("AWS_SESSION_TOKEN", "FQoGZXIvYXdzEXAMPLE/token+with=chars", 1);
    struct objstore *store;
    struct whet_err err;
    if (objstore_open("s3://sig-bucket/tenant 1/ckpts", &store, &err) != 0) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 1;
    }
    objstore_set_multipart(store, 64 << 10, 3);
    int failed = 0;
    const char *body = "signed body";
    if (objstore_put(store, "dir/a b+c~(1)=é.bin", body, strlen(body), &err) != 0) {
        fprintf(stderr, "put: %s\n", err.msg);
        failed = 1;
    }
    if (objstore_put_file(store, "dir/big.bin", argv[2], &err) != 0) {
        fprintf(stderr, "put_file: %s\n", err.msg);
        failed = 1;
    }
    if (objstore_list(store, "dir/", print_key, NULL, &err) != 0) {
        fprintf(stderr, "list: %s\n", err.msg);
        failed = 1;
    }
    struct objstore_info info;
    int rc = objstore_stat(store, "dir/big.bin", &info, &err);
    if (rc != 0) {
        fprintf(stderr, "stat: %s\n", rc == OBJSTORE_NOT_FOUND ? "not found" : err.msg);
        failed = 1;
    } else {
        printf("stat %llu %s\n", (unsigned long long)info.size, info.sha256);
    }
    rc = objstore_read(store, "dir/big.bin", 5, 10, print_chunk, NULL, &err);
    if (rc != 0) {
        fprintf(stderr, "read: %s\n", rc == OBJSTORE_NOT_FOUND ? "not found" : err.msg);
        failed = 1;
    }
    if (objstore_delete(store, "dir/a b+c~(1)=é.bin", &err) != 0) {
        fprintf(stderr, "delete: %s\n", err.msg);
        failed = 1;
    }
    objstore_close(store);
    return failed;
}
