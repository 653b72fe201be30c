/* cmd_files.c - `whet files upload FILE`: a tenant uploads a dataset through the REST API (its key,
 * api_client.h) with a progress bar: one multipart POST /v1/files for a file up to a part's size, the
 * Uploads API in parts above it. The gateway validates every line; its error (the line and the field)
 * is what this prints. The new file's id goes alone to stdout (`FILE_ID=$(whet files upload x.jsonl)`). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_client.h"
#include "buf.h"
#include "commands.h"

#define PART_BYTES ((size_t)64 << 20) /* OpenAI's limit for one part of an upload */

static void files_usage(FILE *out) {
    fprintf(out, "usage: whet files upload FILE [--purpose PURPOSE] [--url URL] [--data-dir DIR]\n\n"
                 "Uploads FILE (JSONL) with a progress bar on stderr and prints the new file's id on stdout. Files\n"
                 "over 64 MiB go through the Uploads API in 64 MiB parts.\n\n"
                 "  --purpose PURPOSE  the file's purpose (default fine-tune)\n"
                 "  --url URL          the gateway (default $WHET_API_BASE, else http://$WHET_HTTP)\n"
                 "  --data-dir DIR     read DIR/whet.env (written by `whet up`) for WHET_HTTP\n\n"
                 "The key comes from WHET_API_KEY (or OPENAI_API_KEY).\n");
}

struct upload_progress {
    struct progress_bar bar;
    const char *name;
    double done, total; /* bytes of earlier parts, and of the whole file */
};

static void show_progress(void *arg, double sent, double total) {
    struct upload_progress *u = arg;
    (void)total;
    char text[300];
    snprintf(text, sizeof text, "%s  %.2f / %.2f MB", u->name, (u->done + sent) / 1e6, u->total / 1e6);
    progress_bar_draw(&u->bar, u->total > 0 ? (u->done + sent) / u->total : 1, text, 0);
}

/* The Uploads API: create, one part per PART_BYTES, complete; answers the completed upload's file. */
static json_t *upload_in_parts(struct api_client *c, const char *path, const char *name, const char *purpose,
                               uint64_t size, struct upload_progress *u, struct whet_err *err) {
    json_t *body = json_pack("{s:s, s:s, s:I, s:s}", "filename", name, "purpose", purpose, "bytes", (json_int_t)size,
                             "mime_type", "application/jsonl");
    json_t *up = api_call(c, "POST", "/v1/uploads", body, NULL, NULL, NULL, err);
    json_decref(body);
    if (!up) return NULL;
    char base[200];
    snprintf(base, sizeof base, "/v1/uploads/%s", json_string_value(json_object_get(up, "id")));
    json_decref(up);
    json_t *parts = json_array();
    char *chunk = xmalloc(PART_BYTES);
    FILE *in = fopen(path, "rb");
    json_t *file = NULL;
    if (!in) whet_errf(err, "cannot open %s", path);
    for (size_t n; in && (n = fread(chunk, 1, PART_BYTES, in)) > 0; u->done += (double)n) {
        curl_mime *mime = curl_mime_init(c->curl);
        curl_mimepart *part = curl_mime_addpart(mime);
        curl_mime_name(part, "data");
        curl_mime_filename(part, name);
        curl_mime_data(part, chunk, n);
        char where[256];
        snprintf(where, sizeof where, "%s/parts", base);
        json_t *p = api_call(c, "POST", where, NULL, mime, show_progress, u, err);
        curl_mime_free(mime);
        if (!p) goto out;
        json_array_append(parts, json_object_get(p, "id"));
        json_decref(p);
    }
    if (in && ferror(in)) {
        whet_errf(err, "cannot read %s", path);
        goto out;
    }
    if (in) {
        char where[256];
        snprintf(where, sizeof where, "%s/complete", base);
        json_t *done = json_pack("{s:O}", "part_ids", parts);
        json_t *upload = api_call(c, "POST", where, done, NULL, NULL, NULL, err);
        json_decref(done);
        if (upload) file = json_incref(json_object_get(upload, "file"));
        json_decref(upload);
    }
out:
    if (in) fclose(in);
    free(chunk);
    json_decref(parts);
    return file;
}

static int files_upload(struct api_client *c, const char *path, const char *purpose) {
    struct whet_err err;
    uint64_t size;
    int fd = whet_open_regular(path, &size, &err);
    if (fd < 0) {
        whet_err_report("whet files upload", &err);
        return 1;
    }
    close(fd);
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    struct upload_progress u = {.name = name, .total = (double)size};
    progress_bar_init(&u.bar, stderr);
    json_t *file;
    if (size <= PART_BYTES) {
        curl_mime *mime = curl_mime_init(c->curl);
        curl_mimepart *part = curl_mime_addpart(mime);
        curl_mime_name(part, "purpose");
        curl_mime_data(part, purpose, CURL_ZERO_TERMINATED);
        part = curl_mime_addpart(mime);
        curl_mime_name(part, "file");
        curl_mime_filedata(part, path);
        file = api_call(c, "POST", "/v1/files", NULL, mime, show_progress, &u, &err);
        curl_mime_free(mime);
    } else {
        file = upload_in_parts(c, path, name, purpose, size, &u, &err);
    }
    if (!file) {
        if (u.bar.tty) fputc('\n', stderr);
        whet_err_report("whet files upload", &err);
        return 1;
    }
    char text[300];
    snprintf(text, sizeof text, "%s  %.2f MB  %s", name, (double)size / 1e6,
             json_string_value(json_object_get(file, "status")));
    progress_bar_draw(&u.bar, 1, text, 1);
    puts(json_string_value(json_object_get(file, "id")));
    json_decref(file);
    return 0;
}

static int cmd_files(int argc, char **argv) {
    static const struct option opts[] = {{"purpose", required_argument, 0, 'p'},
                                         {"url", required_argument, 0, 'u'},
                                         {"data-dir", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0}};
    const char *url = NULL, *data_dir = NULL, *purpose = "fine-tune";
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': purpose = optarg; break;
        case 'u': url = optarg; break;
        case 'd': data_dir = optarg; break;
        case 'h': files_usage(stdout); return 0;
        default: files_usage(stderr); return 2;
        }
    }
    if (argc - optind != 2 || strcmp(argv[optind], "upload") != 0) {
        files_usage(stderr);
        return 2;
    }
    struct api_client *client = api_client_open("whet files", url, data_dir);
    int rc = client ? files_upload(client, argv[optind + 1], purpose) : 1;
    api_client_close(client);
    return rc;
}
WHET_COMMAND("files", cmd_files, "upload a dataset with a progress bar (tenants, through the API)")
