/* validate.c - the JSONL checks of fine-tuning files (see validate.h for the formats and rules).
 *
 * Layout: small JSON helpers that produce "path: what is wrong" messages; one checker per piece of the
 * formats (content parts, tool calls, a message, a message list); one per format (sft, dpo, rft);
 * format detection; then the line stream, which splits bytes into lines, enforces the limits and adds
 * "line N: " to whatever the line checkers said. */
#include "validate.h"
#include "json.h"
#include "json_text.h"
#include "utf8.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- names */

const char *validate_format_name(enum validate_format format) {
    switch (format) {
    case VALIDATE_FORMAT_SFT: return "sft";
    case VALIDATE_FORMAT_DPO: return "dpo";
    case VALIDATE_FORMAT_RFT: return "rft";
    default: return "auto";
    }
}

enum validate_format validate_format_for_method(const char *method_type) {
    if (!method_type) return VALIDATE_FORMAT_AUTO;
    if (strcmp(method_type, "supervised") == 0) return VALIDATE_FORMAT_SFT;
    if (strcmp(method_type, "dpo") == 0) return VALIDATE_FORMAT_DPO;
    if (strcmp(method_type, "reinforcement") == 0) return VALIDATE_FORMAT_RFT;
    return VALIDATE_FORMAT_AUTO;
}

enum validate_format validate_format_parse(const char *name) {
    if (!name) return VALIDATE_FORMAT_AUTO;
    if (strcmp(name, "sft") == 0) return VALIDATE_FORMAT_SFT;
    if (strcmp(name, "dpo") == 0) return VALIDATE_FORMAT_DPO;
    if (strcmp(name, "rft") == 0) return VALIDATE_FORMAT_RFT;
    return VALIDATE_FORMAT_AUTO;
}

/* ---------------------------------------------------------------- JSON helpers */

/* Field paths are short ("input.messages[3].content[0].image_url.url"); longer ones are truncated,
 * which only shortens a message. */
#define PATH_MAX_LEN 160


static int expect_type(const json_t *v, json_type type, const char *what, const char *path, struct whet_err *err) {
    if (json_typeof(v) == type) return 0;
    return whet_errf_at(err, path, "expected %s, found %s", what, whet_json_kind(v));
}

/* Appends `s` to the path in `out` (which holds `len` bytes), truncating at PATH_MAX_LEN - 1. */
static size_t path_append(char out[PATH_MAX_LEN], size_t len, const char *s) {
    size_t n = strlen(s);
    if (n > PATH_MAX_LEN - 1 - len) n = PATH_MAX_LEN - 1 - len;
    memcpy(out + len, s, n);
    out[len + n] = 0;
    return utf8_trim_incomplete(out, len + n);
}

static void path_key(char out[PATH_MAX_LEN], const char *parent, const char *key) {
    out[0] = 0;
    size_t len = path_append(out, 0, parent);
    if (parent[0]) len = path_append(out, len, ".");
    path_append(out, len, key);
}

static void path_index(char out[PATH_MAX_LEN], const char *parent, size_t i) {
    char index[24];
    snprintf(index, sizeof index, "[%zu]", i);
    out[0] = 0;
    path_append(out, path_append(out, 0, parent), index);
}

/* The member `key` of `obj` (NULL when absent); its path goes to `sub`. */
static const json_t *member(const json_t *obj, const char *key, const char *path, char sub[PATH_MAX_LEN]) {
    path_key(sub, path, key);
    return json_object_get(obj, key);
}

/* Every key of `obj` must be one of the NULL-terminated `allowed`. */
static int check_known_keys(const json_t *obj, const char *const *allowed, const char *path, struct whet_err *err) {
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        int known = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(key, *a) == 0) known = 1;
        if (!known) {
            char sub[PATH_MAX_LEN];
            path_key(sub, path, key);
            return whet_errf_at(err, sub, "unknown field");
        }
    }
    return 0;
}

/* An optional string field: absent is fine, present must be a string. */
static int check_optional_string(const json_t *obj, const char *key, const char *path, struct whet_err *err) {
    char sub[PATH_MAX_LEN];
    const json_t *v = member(obj, key, path, sub);
    return v ? expect_type(v, JSON_STRING, "a string", sub, err) : 0;
}

static int check_required_string(const json_t *obj, const char *key, const char *path, struct whet_err *err) {
    char sub[PATH_MAX_LEN];
    const json_t *v = member(obj, key, path, sub);
    if (!v) return whet_errf_at(err, sub, "missing");
    return expect_type(v, JSON_STRING, "a string", sub, err);
}

/* ---------------------------------------------------------------- messages */

enum role { ROLE_SYSTEM, ROLE_DEVELOPER, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL, ROLE_COUNT };
static const char *const role_names[ROLE_COUNT] = {"system", "developer", "user", "assistant", "tool"};
#define ROLES_ALL ((1u << ROLE_COUNT) - 1)
#define ROLES_ASSISTANT (1u << ROLE_ASSISTANT)

/* '"system", "user"' for the roles in `mask`, for "expected one of …". */
static void roles_list(char *out, size_t size, unsigned mask) {
    size_t n = 0;
    out[0] = 0;
    for (int r = 0; r < ROLE_COUNT; r++) {
        if (!(mask & (1u << r))) continue;
        int w = snprintf(out + n, size - n, "%s\"%s\"", n ? ", " : "", role_names[r]);
        if (w < 0 || (size_t)w >= size - n) break;
        n += (size_t)w;
    }
}

/* content: a string or a non-empty array of parts; image parts only where `allow_images`. */
static int check_content_parts(const json_t *parts, int allow_images, const char *path, struct whet_err *err) {
    if (json_array_size(parts) == 0) return whet_errf_at(err, path, "expected at least one content part");
    for (size_t i = 0; i < json_array_size(parts); i++) {
        const json_t *part = json_array_get(parts, i);
        char pp[PATH_MAX_LEN], sub[PATH_MAX_LEN];
        path_index(pp, path, i);
        if (expect_type(part, JSON_OBJECT, "an object", pp, err)) return -1;
        const json_t *type = member(part, "type", pp, sub);
        if (!type) return whet_errf_at(err, sub, "missing");
        if (expect_type(type, JSON_STRING, "a string", sub, err)) return -1;
        const char *t = json_string_value(type);
        if (strcmp(t, "text") == 0) {
            static const char *const keys[] = {"type", "text", NULL};
            if (check_known_keys(part, keys, pp, err)) return -1;
            if (check_required_string(part, "text", pp, err)) return -1;
        } else if (strcmp(t, "image_url") == 0 && allow_images) {
            static const char *const keys[] = {"type", "image_url", NULL};
            if (check_known_keys(part, keys, pp, err)) return -1;
            const json_t *img = member(part, "image_url", pp, sub);
            if (!img) return whet_errf_at(err, sub, "missing");
            if (expect_type(img, JSON_OBJECT, "an object", sub, err)) return -1;
            static const char *const img_keys[] = {"url", "detail", NULL};
            if (check_known_keys(img, img_keys, sub, err)) return -1;
            if (check_required_string(img, "url", sub, err)) return -1;
            json_t *detail = json_object_get(img, "detail");
            if (detail) {
                char dp[PATH_MAX_LEN];
                path_key(dp, sub, "detail");
                const char *d = json_string_value(detail);
                if (!d || (strcmp(d, "auto") && strcmp(d, "low") && strcmp(d, "high")))
                    return whet_errf_at(err, dp, "expected one of \"auto\", \"low\", \"high\"");
            }
        } else {
            return whet_errf_at(err, sub, "expected %s", allow_images ? "\"text\" or \"image_url\"" : "\"text\"");
        }
    }
    return 0;
}

static int check_function_object(const json_t *fn, const char *path, int need_arguments, struct whet_err *err) {
    if (expect_type(fn, JSON_OBJECT, "an object", path, err)) return -1;
    if (check_required_string(fn, "name", path, err)) return -1;
    if (need_arguments) return check_required_string(fn, "arguments", path, err);
    return 0;
}

/* The "type": "function" and the "function" object of a tool call (`is_call`: its type may be left
 * out and its function carries arguments) or of a tool; the function's path goes to `fn_path`. NULL,
 * with err set, when either is wrong. */
static const json_t *check_function_entry(const json_t *entry, const char *path, int is_call,
                                          char fn_path[PATH_MAX_LEN], struct whet_err *err) {
    char sub[PATH_MAX_LEN];
    const json_t *type = member(entry, "type", path, sub);
    int is_function = type && json_is_string(type) && strcmp(json_string_value(type), "function") == 0;
    if (!is_function && (type || !is_call)) {
        whet_errf_at(err, sub, "expected \"function\"");
        return NULL;
    }
    const json_t *fn = member(entry, "function", path, fn_path);
    if (!fn) {
        whet_errf_at(err, fn_path, "missing");
        return NULL;
    }
    return check_function_object(fn, fn_path, is_call, err) ? NULL : fn;
}

static int check_tool_calls(const json_t *calls, const char *path, struct whet_err *err) {
    if (expect_type(calls, JSON_ARRAY, "an array", path, err)) return -1;
    if (json_array_size(calls) == 0) return whet_errf_at(err, path, "expected at least one tool call");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *call = json_array_get(calls, i);
        char cp[PATH_MAX_LEN], sub[PATH_MAX_LEN];
        path_index(cp, path, i);
        if (expect_type(call, JSON_OBJECT, "an object", cp, err)) return -1;
        static const char *const keys[] = {"id", "type", "function", NULL};
        if (check_known_keys(call, keys, cp, err)) return -1;
        if (check_optional_string(call, "id", cp, err)) return -1;
        if (!check_function_entry(call, cp, 1, sub, err)) return -1;
    }
    return 0;
}

/* `tools` beside the messages: function definitions the assistant may call. */
static int check_tools(const json_t *tools, const char *path, struct whet_err *err) {
    if (expect_type(tools, JSON_ARRAY, "an array", path, err)) return -1;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *tool = json_array_get(tools, i);
        char tp[PATH_MAX_LEN], sub[PATH_MAX_LEN];
        path_index(tp, path, i);
        if (expect_type(tool, JSON_OBJECT, "an object", tp, err)) return -1;
        const json_t *fn = check_function_entry(tool, tp, 0, sub, err);
        if (!fn) return -1;
        json_t *params = json_object_get(fn, "parameters");
        if (params) {
            char pp[PATH_MAX_LEN];
            path_key(pp, sub, "parameters");
            if (expect_type(params, JSON_OBJECT, "an object", pp, err)) return -1;
        }
    }
    return 0;
}

/* One chat message whose role must be in `roles`; its role is stored in *role_out. */
static int check_message(const json_t *msg, unsigned roles, const char *path, enum role *role_out, struct whet_err *err) {
    char sub[PATH_MAX_LEN];
    if (expect_type(msg, JSON_OBJECT, "an object", path, err)) return -1;
    const json_t *role = member(msg, "role", path, sub);
    if (!role) return whet_errf_at(err, sub, "missing");
    if (expect_type(role, JSON_STRING, "a string", sub, err)) return -1;
    int r = -1;
    for (int i = 0; i < ROLE_COUNT; i++)
        if ((roles & (1u << i)) && strcmp(json_string_value(role), role_names[i]) == 0) r = i;
    if (r < 0) {
        char list[128];
        roles_list(list, sizeof list, roles);
        if (roles == ROLES_ASSISTANT) return whet_errf_at(err, sub, "expected \"assistant\"");
        return whet_errf_at(err, sub, "expected one of %s", list);
    }
    *role_out = (enum role)r;

    static const char *const keys[] = {"role", "content", "name", "weight", "tool_calls", "function_call",
                                       "tool_call_id", NULL};
    if (check_known_keys(msg, keys, path, err)) return -1;
    if (check_optional_string(msg, "name", path, err)) return -1;

    json_t *weight = json_object_get(msg, "weight");
    if (weight) {
        path_key(sub, path, "weight");
        if (r != ROLE_ASSISTANT) return whet_errf_at(err, sub, "only assistant messages may carry a weight");
        if (!json_is_integer(weight) || (json_integer_value(weight) != 0 && json_integer_value(weight) != 1))
            return whet_errf_at(err, sub, "expected 0 or 1");
    }
    json_t *tool_calls = json_object_get(msg, "tool_calls");
    json_t *function_call = json_object_get(msg, "function_call");
    if ((tool_calls || function_call) && r != ROLE_ASSISTANT) {
        path_key(sub, path, tool_calls ? "tool_calls" : "function_call");
        return whet_errf_at(err, sub, "only assistant messages may call tools");
    }
    if (tool_calls) {
        path_key(sub, path, "tool_calls");
        if (check_tool_calls(tool_calls, sub, err)) return -1;
    }
    if (function_call) {
        path_key(sub, path, "function_call");
        if (check_function_object(function_call, sub, 1, err)) return -1;
    }
    json_t *tool_call_id = json_object_get(msg, "tool_call_id");
    if (tool_call_id) {
        path_key(sub, path, "tool_call_id");
        if (r != ROLE_TOOL) return whet_errf_at(err, sub, "only tool messages answer a tool call");
        if (expect_type(tool_call_id, JSON_STRING, "a string", sub, err)) return -1;
    }

    const json_t *content = member(msg, "content", path, sub);
    if (!content || json_is_null(content)) {
        /* An assistant turn that only calls a tool has no content. */
        if (r == ROLE_ASSISTANT && (tool_calls || function_call)) return 0;
        return whet_errf_at(err, sub, "missing");
    }
    if (json_is_string(content)) return 0;
    if (json_is_array(content)) return check_content_parts(content, r == ROLE_USER, sub, err);
    return whet_errf_at(err, sub, "expected a string or an array of content parts, found %s", whet_json_kind(content));
}

/* A non-empty array of messages. Reports how many are the assistant's and the last one's role. */
static int check_messages(const json_t *list, unsigned roles, const char *path, size_t *assistant_count,
                          enum role *last_role, struct whet_err *err) {
    if (!list) return whet_errf_at(err, path, "missing");
    if (expect_type(list, JSON_ARRAY, "an array", path, err)) return -1;
    if (json_array_size(list) == 0) return whet_errf_at(err, path, "expected at least one message");
    *assistant_count = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        char mp[PATH_MAX_LEN];
        path_index(mp, path, i);
        enum role r = ROLE_USER;
        if (check_message(json_array_get(list, i), roles, mp, &r, err)) return -1;
        if (r == ROLE_ASSISTANT) (*assistant_count)++;
        *last_role = r;
    }
    return 0;
}

static int check_parallel_tool_calls(const json_t *obj, const char *path, struct whet_err *err) {
    char sub[PATH_MAX_LEN];
    const json_t *v = member(obj, "parallel_tool_calls", path, sub);
    if (v && !json_is_boolean(v)) return whet_errf_at(err, sub, "expected a boolean, found %s", whet_json_kind(v));
    return 0;
}

static int check_optional_tools(const json_t *obj, const char *path, struct whet_err *err) {
    char sub[PATH_MAX_LEN];
    const json_t *tools = member(obj, "tools", path, sub);
    return tools ? check_tools(tools, sub, err) : 0;
}

/* ---------------------------------------------------------------- formats */

static int check_sft(const json_t *line, struct whet_err *err) {
    static const char *const keys[] = {"messages", "tools", "parallel_tool_calls", NULL};
    if (check_known_keys(line, keys, "", err)) return -1;
    size_t assistants;
    enum role last = ROLE_USER;
    if (check_messages(json_object_get(line, "messages"), ROLES_ALL, "messages", &assistants, &last, err)) return -1;
    if (assistants == 0) return whet_errf_at(err, "messages", "expected at least one assistant message to train on");
    if (check_optional_tools(line, "", err)) return -1;
    return check_parallel_tool_calls(line, "", err);
}

/* preferred_output (or its older name preferred_completion): a non-empty list of assistant messages.
 * The older names also take one assistant message or its plain text, as the trainer reads them
 * (executor/train/data/dpo_data.c). */
static int check_dpo_output(const json_t *line, const char *name, const char *old_name, struct whet_err *err) {
    json_t *v = json_object_get(line, name);
    json_t *old = json_object_get(line, old_name);
    if (v && old) return whet_errf_at(err, old_name, "give either %s or %s, not both", name, old_name);
    if (!v && !old) return whet_errf_at(err, name, "missing");
    size_t assistants;
    enum role last = ROLE_USER;
    if (v) return check_messages(v, ROLES_ASSISTANT, name, &assistants, &last, err);
    if (json_is_string(old)) return 0;
    if (!json_is_object(old)) return check_messages(old, ROLES_ASSISTANT, old_name, &assistants, &last, err);
    json_t *one = json_pack("[O]", old);
    int rc = check_messages(one, ROLES_ASSISTANT, old_name, &assistants, &last, err);
    json_decref(one);
    return rc;
}

static int check_dpo(const json_t *line, struct whet_err *err) {
    static const char *const keys[] = {"input", "preferred_output", "non_preferred_output", "preferred_completion",
                                       "non_preferred_completion", NULL};
    if (check_known_keys(line, keys, "", err)) return -1;
    json_t *input = json_object_get(line, "input");
    if (!input) return whet_errf_at(err, "input", "missing");
    if (expect_type(input, JSON_OBJECT, "an object", "input", err)) return -1;
    static const char *const input_keys[] = {"messages", "tools", "parallel_tool_calls", NULL};
    if (check_known_keys(input, input_keys, "input", err)) return -1;
    size_t assistants;
    enum role last = ROLE_USER;
    if (check_messages(json_object_get(input, "messages"), ROLES_ALL, "input.messages", &assistants, &last, err))
        return -1;
    if (last == ROLE_ASSISTANT)
        return whet_errf_at(err, "input.messages",
                            "the prompt must not end with an assistant message (the outputs answer it)");
    if (check_optional_tools(input, "input", err)) return -1;
    if (check_parallel_tool_calls(input, "input", err)) return -1;
    if (check_dpo_output(line, "preferred_output", "preferred_completion", err)) return -1;
    return check_dpo_output(line, "non_preferred_output", "non_preferred_completion", err);
}

static int check_rft(const json_t *line, struct whet_err *err) {
    size_t assistants;
    enum role last = ROLE_USER;
    if (check_messages(json_object_get(line, "messages"), ROLES_ALL, "messages", &assistants, &last, err)) return -1;
    if (last != ROLE_USER && last != ROLE_DEVELOPER) {
        char at[PATH_MAX_LEN];
        path_index(at, "messages", json_array_size(json_object_get(line, "messages")) - 1);
        return whet_errf_at(err, at, "the last message must be the user's turn (the model answers it), found \"%s\"",
                            role_names[last]);
    }
    /* Every other field is the item the grader reads ({{item.name}}): any JSON. */
    return 0;
}

/* The format a line looks like, for files uploaded without a method. */
static enum validate_format detect_format(const json_t *line) {
    if (json_object_get(line, "input") || json_object_get(line, "preferred_output") ||
        json_object_get(line, "non_preferred_output") || json_object_get(line, "preferred_completion") ||
        json_object_get(line, "non_preferred_completion"))
        return VALIDATE_FORMAT_DPO;
    json_t *messages = json_object_get(line, "messages");
    size_t n = json_array_size(messages);
    if (n > 0) {
        const char *role = json_string_value(json_object_get(json_array_get(messages, n - 1), "role"));
        if (role && (strcmp(role, "user") == 0 || strcmp(role, "developer") == 0)) return VALIDATE_FORMAT_RFT;
    }
    return VALIDATE_FORMAT_SFT;
}

/* validate_line, also reporting the format the line looks like (*looks_like, AUTO when it is not an
 * object), so that the stream can explain a line of another format than the file's. */
static int validate_line_detect(const char *line, size_t len, enum validate_format expect, enum validate_format *found,
                                enum validate_format *looks_like, struct whet_err *err) {
    *looks_like = VALIDATE_FORMAT_AUTO;
    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) return whet_errf(err, "invalid JSON at column %d: %s", jerr.column, jerr.text);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = whet_errf(err, "expected a JSON object, found %s", whet_json_kind(root));
        goto out;
    }
    *looks_like = detect_format(root);
    enum validate_format format = expect == VALIDATE_FORMAT_AUTO ? *looks_like : expect;
    switch (format) {
    case VALIDATE_FORMAT_SFT: rc = check_sft(root, err); break;
    case VALIDATE_FORMAT_DPO: rc = check_dpo(root, err); break;
    default: rc = check_rft(root, err); break;
    }
    if (rc == 0 && found) *found = format;
out:
    json_decref(root);
    return rc;
}

int validate_line(const char *line, size_t len, enum validate_format expect, enum validate_format *found,
                  struct whet_err *err) {
    enum validate_format looks_like;
    return validate_line_detect(line, len, expect, found, &looks_like, err);
}

/* ---------------------------------------------------------------- the line stream */

struct validate_stream {
    enum validate_format expect; /* as given; AUTO until the first line fixes it */
    struct validate_limits limits;
    char *pending; /* an incomplete line carried over between feeds */
    size_t pending_len, pending_cap;
    size_t line_no;       /* physical lines seen, for messages */
    size_t blank_line_no; /* the first blank line not yet followed by an example, or 0 */
    int detected;         /* the format came from the first line, not from the caller */
    int mid_file;         /* a slice that starts after the file's first line: no byte-order mark to skip */
    struct validate_summary summary;
    int failed;
    struct whet_err error;
};

struct validate_stream *validate_stream_new(enum validate_format expect, const struct validate_limits *limits) {
    struct validate_stream *s = xcalloc(1, sizeof *s);
    s->expect = expect;
    if (limits) s->limits = *limits;
    if (!s->limits.max_line_bytes) s->limits.max_line_bytes = VALIDATE_DEFAULT_MAX_LINE_BYTES;
    if (!s->limits.max_lines) s->limits.max_lines = VALIDATE_DEFAULT_MAX_LINES;
    if (!s->limits.max_total_bytes) s->limits.max_total_bytes = VALIDATE_DEFAULT_MAX_TOTAL_BYTES;
    if (!s->limits.min_lines) s->limits.min_lines = 1;
    s->summary.format = expect;
    return s;
}

void validate_stream_free(struct validate_stream *s) {
    if (!s) return;
    free(s->pending);
    free(s);
}

static int stream_fail(struct validate_stream *s, struct whet_err *err) {
    s->failed = 1;
    if (err) *err = s->error;
    return -1;
}

static int is_blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t') return 0;
    return 1;
}

/* One complete line (without '\n'). */
static int stream_line(struct validate_stream *s, const char *p, size_t n, struct whet_err *err) {
    s->line_no++;
    if (s->line_no == 1 && !s->mid_file) p = whet_json_skip_bom(p, &n);
    if (n > 0 && p[n - 1] == '\r') n--;
    if (is_blank(p, n)) {
        /* Blank lines are allowed only at the end of the file. */
        if (!s->blank_line_no) s->blank_line_no = s->line_no;
        return 0;
    }
    if (s->blank_line_no) {
        whet_errf(&s->error, "line %zu: empty line (examples must follow one another, one per line)",
                  s->blank_line_no);
        return stream_fail(s, err);
    }
    if (s->summary.lines >= s->limits.max_lines) {
        whet_errf(&s->error, "line %zu: too many examples (at most %zu)", s->line_no, s->limits.max_lines);
        return stream_fail(s, err);
    }
    enum validate_format found = VALIDATE_FORMAT_AUTO, looks_like;
    if (validate_line_detect(p, n, s->expect, &found, &looks_like, &s->error)) {
        /* In a file whose first line fixed the format, a preference pair among chat examples (or the
         * reverse) is better explained as such than by the first field the other format lacks. */
        if (s->detected && looks_like != VALIDATE_FORMAT_AUTO && looks_like != s->expect &&
            (looks_like == VALIDATE_FORMAT_DPO || s->expect == VALIDATE_FORMAT_DPO))
            whet_errf(&s->error, "%s example in a file of %s examples (the first line decides the format)",
                      validate_format_name(looks_like), validate_format_name(s->expect));
        whet_err_prefix(&s->error, "line %zu", s->line_no);
        return stream_fail(s, err);
    }
    if (s->expect == VALIDATE_FORMAT_AUTO) {
        /* The first example fixes the format of the file. */
        s->detected = 1;
        s->expect = found;
        s->summary.format = found;
    }
    s->summary.lines++;
    s->summary.per_format[found]++;
    return 0;
}

static int stream_too_long(struct validate_stream *s, struct whet_err *err) {
    whet_errf(&s->error, "line %zu: longer than %zu bytes", s->line_no + 1, s->limits.max_line_bytes);
    return stream_fail(s, err);
}

int validate_stream_feed(struct validate_stream *s, const void *data, size_t len, struct whet_err *err) {
    if (s->failed) return stream_fail(s, err);
    s->summary.bytes += len;
    if (s->summary.bytes > s->limits.max_total_bytes) {
        whet_errf(&s->error, "file is larger than %llu bytes", (unsigned long long)s->limits.max_total_bytes);
        return stream_fail(s, err);
    }
    const char *p = data, *end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((nl ? nl : end) - p);
        /* +1: a line may end in "\r" that is not counted against the limit. */
        if (s->pending_len + n > s->limits.max_line_bytes + 1) return stream_too_long(s, err);
        if (nl && s->pending_len == 0) {
            if (stream_line(s, p, n, err)) return -1; /* whole line inside this chunk: no copy */
        } else {
            if (s->pending_len + n > s->pending_cap) {
                s->pending_cap = (s->pending_len + n) * 2;
                if (s->pending_cap > s->limits.max_line_bytes + 2) s->pending_cap = s->limits.max_line_bytes + 2;
                s->pending = xrealloc(s->pending, s->pending_cap);
            }
            memcpy(s->pending + s->pending_len, p, n);
            s->pending_len += n;
            if (nl) {
                if (stream_line(s, s->pending, s->pending_len, err)) return -1;
                s->pending_len = 0;
            }
        }
        p += n + (nl ? 1 : 0);
    }
    return 0;
}

/* The last line, when the data did not end with a newline. */
static int stream_flush(struct validate_stream *s, struct whet_err *err) {
    if (s->failed) return stream_fail(s, err);
    if (s->pending_len > 0) {
        if (stream_line(s, s->pending, s->pending_len, err)) return -1;
        s->pending_len = 0;
    }
    return 0;
}

int validate_stream_finish(struct validate_stream *s, struct validate_summary *out, struct whet_err *err) {
    if (stream_flush(s, err)) return -1;
    if (s->summary.lines == 0) {
        whet_errf(&s->error, "file has no examples");
        return stream_fail(s, err);
    }
    if (s->summary.lines < s->limits.min_lines) {
        whet_errf(&s->error, "file has %zu examples; at least %zu are needed", s->summary.lines, s->limits.min_lines);
        return stream_fail(s, err);
    }
    if (out) *out = s->summary;
    return 0;
}

int validate_jsonl(const void *data, size_t len, enum validate_format expect, const struct validate_limits *limits,
                   struct validate_summary *out, struct whet_err *err) {
    struct validate_stream *s = validate_stream_new(expect, limits);
    int rc = validate_stream_feed(s, data, len, err);
    if (rc == 0) rc = validate_stream_finish(s, out, err);
    validate_stream_free(s);
    return rc;
}

/* ---------------------------------------------------------------- a buffer, in parallel */

/* One slice of the buffer, whole lines only, checked by its own stream. Its messages would carry the
 * slice's line numbers, so they are not used: any trouble sends the whole buffer through the serial
 * path, which then says exactly what validate_jsonl says. */
struct slice {
    const char *p;
    size_t n;
    enum validate_format format;
    int detected;
    int mid_file; /* every slice but the first */
    const struct validate_limits *limits;
    pthread_t tid;
    int started; /* on its own thread (slice 0 runs on the caller's) */
    int ok;
    size_t lines;
    size_t per_format[VALIDATE_FORMAT_COUNT];
    int trailing_blank; /* ends in blank lines: an example in a later slice makes the file invalid */
};

static void *slice_run(void *arg) {
    struct slice *sl = arg;
    struct validate_stream *s = validate_stream_new(sl->format, sl->limits);
    s->detected = sl->detected;
    s->mid_file = sl->mid_file;
    sl->ok = validate_stream_feed(s, sl->p, sl->n, NULL) == 0 && stream_flush(s, NULL) == 0;
    sl->lines = s->summary.lines;
    memcpy(sl->per_format, s->summary.per_format, sizeof sl->per_format);
    sl->trailing_blank = s->blank_line_no != 0;
    validate_stream_free(s);
    return NULL;
}

#define SLICES_MAX 64

int validate_jsonl_parallel(const void *data, size_t len, enum validate_format expect,
                            const struct validate_limits *limits, int threads, size_t min_slice_bytes,
                            struct validate_summary *out, struct whet_err *err) {
    struct validate_limits lim = {0};
    if (limits) lim = *limits;
    uint64_t max_total = lim.max_total_bytes ? lim.max_total_bytes : VALIDATE_DEFAULT_MAX_TOTAL_BYTES;
    size_t max_lines = lim.max_lines ? lim.max_lines : VALIDATE_DEFAULT_MAX_LINES;
    size_t min_lines = lim.min_lines ? lim.min_lines : 1;
    if (threads > SLICES_MAX) threads = SLICES_MAX;
    if (min_slice_bytes == 0) min_slice_bytes = 1;
    if (threads < 2 || len / min_slice_bytes < 2 || len > max_total)
        return validate_jsonl(data, len, expect, limits, out, err);

    /* The first example fixes the format, as in the serial path; it is checked here, once. */
    const char *p = data, *end = p + len;
    enum validate_format format = expect;
    int detected = 0;
    for (const char *line = p; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t n = (size_t)((nl ? nl : end) - line);
        const char *text = line == p ? whet_json_skip_bom(line, &n) : line;
        if (n > 0 && text[n - 1] == '\r') n--;
        if (!is_blank(text, n)) {
            if (expect == VALIDATE_FORMAT_AUTO) {
                enum validate_format looks_like;
                if (n > (lim.max_line_bytes ? lim.max_line_bytes : VALIDATE_DEFAULT_MAX_LINE_BYTES) ||
                    validate_line_detect(text, n, VALIDATE_FORMAT_AUTO, &format, &looks_like, NULL))
                    return validate_jsonl(data, len, expect, limits, out, err);
                detected = 1;
            }
            break;
        }
        line = nl ? nl + 1 : end;
    }
    if (format == VALIDATE_FORMAT_AUTO) return validate_jsonl(data, len, expect, limits, out, err); /* no examples */

    /* Slices end after a newline, so every line is whole in one slice. */
    size_t nslices = (size_t)threads;
    if (len / min_slice_bytes < nslices) nslices = len / min_slice_bytes;
    struct slice slices[SLICES_MAX];
    size_t count = 0, start = 0;
    for (size_t i = 0; i < nslices && start < len; i++) {
        size_t stop = len;
        if (i + 1 < nslices) {
            size_t target = len / nslices * (i + 1);
            if (target < start) target = start;
            const char *nl = memchr(p + target, '\n', len - target);
            stop = nl ? (size_t)(nl - p) + 1 : len;
        }
        slices[count++] = (struct slice){.p = p + start, .n = stop - start, .format = format, .detected = detected,
                                         .mid_file = start > 0, .limits = limits};
        start = stop;
    }
    for (size_t i = 1; i < count; i++) slices[i].started = pthread_create(&slices[i].tid, NULL, slice_run, &slices[i]) == 0;
    for (size_t i = 0; i < count; i++)
        if (!slices[i].started) slice_run(&slices[i]); /* slice 0, and any thread that could not start */
    for (size_t i = 1; i < count; i++)
        if (slices[i].started) pthread_join(slices[i].tid, NULL);

    struct validate_summary sum = {.format = format, .bytes = len};
    int ok = 1, blank_before = 0;
    for (size_t i = 0; i < count; i++) {
        ok &= slices[i].ok;
        if (slices[i].lines > 0 && blank_before) ok = 0;
        if (slices[i].trailing_blank) blank_before = 1;
        sum.lines += slices[i].lines;
        for (int f = 0; f < VALIDATE_FORMAT_COUNT; f++) sum.per_format[f] += slices[i].per_format[f];
    }
    if (!ok || sum.lines == 0 || sum.lines > max_lines || sum.lines < min_lines)
        return validate_jsonl(data, len, expect, limits, out, err);
    if (out) *out = sum;
    return 0;
}
