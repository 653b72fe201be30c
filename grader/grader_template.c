/* grader_template.c - `{{item.a.b}}` and `{{sample.output_json.x}}` in a grader's input and reference.
 *
 * A placeholder is `{{ root.seg.seg… }}` (spaces inside the braces are ignored), root being `item`
 * (the dataset row) or `sample` (the model's answer). Each segment is an object key, or an index
 * when the value there is an array. The value found is inserted as it is when a string and as
 * compact JSON otherwise. `sample.output_json` falls back to parsing `sample.output_text` when the
 * sample carries no output_json, as OpenAI fills it from a sample that is valid JSON. Text without a
 * closing `}}` stays as it is. */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "grader.h"
#include "json_text.h"
#include "utf8.h"

/* The next segment of `path` (up to '.' or the end) into seg; returns where the rest starts. */
static const char *next_segment(const char *path, const char *end, const char **seg, size_t *len) {
    const char *dot = memchr(path, '.', (size_t)(end - path));
    *seg = path;
    *len = (size_t)((dot ? dot : end) - path);
    return dot ? dot + 1 : end;
}

static const json_t *child(const json_t *v, const char *seg, size_t len) {
    if (json_is_object(v)) return json_object_getn(v, seg, len);
    if (json_is_array(v) && len > 0 && len < 10) {
        size_t index = 0;
        for (size_t k = 0; k < len; k++) {
            if (seg[k] < '0' || seg[k] > '9') return NULL;
            index = index * 10 + (size_t)(seg[k] - '0');
        }
        return json_array_get(v, index);
    }
    return NULL;
}

static void report(grader_error_fn on_error, void *ctx, enum grader_error_kind kind, int len, const char *path,
                   const char *detail) {
    if (!on_error) return;
    char *message = xasprintf("{{%.*s}}: %s", len, path, detail);
    on_error(ctx, kind, message);
    free(message);
}

/* Looks up one placeholder's path (without braces or spaces) and appends its value. */
static void render_path(struct whet_buf *out, const char *path, const char *end, const json_t *sample,
                        const json_t *item, json_t **parsed_output, grader_error_fn on_error, void *ctx) {
    int len = (int)(end - path);
    const char *seg;
    size_t seg_len;
    const char *rest = next_segment(path, end, &seg, &seg_len);
    const json_t *v;
    if (seg_len == 4 && memcmp(seg, "item", 4) == 0) {
        v = item;
    } else if (seg_len == 6 && memcmp(seg, "sample", 6) == 0) {
        v = sample;
    } else {
        report(on_error, ctx, GRADER_ERR_INVALID_VARIABLE, len, path,
               "a variable starts with item. or sample.");
        return;
    }
    int first = 1;
    while (v && rest < end) {
        rest = next_segment(rest, end, &seg, &seg_len);
        const json_t *next = child(v, seg, seg_len);
        if (!next && first && v == sample && seg_len == 11 && memcmp(seg, "output_json", 11) == 0) {
            if (!*parsed_output) {
                const char *text = json_string_value(json_object_get(sample, "output_text"));
                *parsed_output = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
                if (!*parsed_output) {
                    report(on_error, ctx, GRADER_ERR_SAMPLE_PARSE, len, path,
                           "the sample's output_text is not JSON");
                    return;
                }
            }
            next = *parsed_output;
        }
        v = next;
        first = 0;
    }
    if (!v) {
        report(on_error, ctx, GRADER_ERR_INVALID_VARIABLE, len, path, "no such field");
        return;
    }
    if (json_is_string(v)) {
        whet_buf_append(out, json_string_value(v), json_string_length(v));
        return;
    }
    char *text = whet_json_compact(v, NULL); /* 0.1 as "0.1", not jansson's 0.10000000000000001 */
    if (text) whet_buf_puts(out, text);
    free(text);
}

char *grader_template_render(const char *tmpl, const json_t *sample, const json_t *item, grader_error_fn on_error,
                             void *ctx) {
    struct whet_buf out = {0};
    whet_buf_append(&out, "", 0);
    json_t *empty = json_object();
    if (!item) item = empty;
    if (!sample) sample = empty;
    json_t *parsed_output = NULL;
    const char *p = tmpl;
    for (;;) {
        const char *open = strstr(p, "{{");
        const char *close = open ? strstr(open + 2, "}}") : NULL;
        if (!close) {
            whet_buf_puts(&out, p);
            break;
        }
        whet_buf_append(&out, p, (size_t)(open - p));
        const char *start = open + 2, *end = close;
        while (start < end && (*start == ' ' || *start == '\t')) start++;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t')) end--;
        render_path(&out, start, end, sample, item, &parsed_output, on_error, ctx);
        p = close + 2;
    }
    json_decref(parsed_output);
    json_decref(empty);
    return out.data;
}

json_t *grader_sample_from_text(const char *text) {
    /* A sampled response may stop in the middle of a character or hold bytes that are no UTF-8 at
     * all; JSON strings cannot, so each such byte becomes U+FFFD, as a decoder shows it. */
    struct whet_buf clean = {0};
    const unsigned char *end = (const unsigned char *)text + strlen(text);
    for (const unsigned char *p = (const unsigned char *)text; p < end;) {
        size_t n = utf8_seq_len(p, (size_t)(end - p));
        if (n) whet_buf_append(&clean, (const char *)p, n);
        else whet_buf_append(&clean, UTF8_REPLACEMENT, 3);
        p += n ? n : 1;
    }
    json_t *sample = json_pack("{s:s%}", "output_text", clean.data ? clean.data : "", clean.len);
    free(clean.data);
    json_t *parsed = json_loads(text, JSON_DECODE_ANY, NULL);
    if (parsed) json_object_set_new(sample, "output_json", parsed);
    return sample;
}
