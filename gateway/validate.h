/* validate.h - checks the lines of a `fine-tune` JSONL file before it is stored (issue 2: "validation at
 * upload and at job creation, not later").
 *
 * Pure logic, no I/O. Each line must be one JSON object in one of OpenAI's fine-tuning formats:
 *
 *   sft  {"messages": [{"role": "system"|"developer"|"user"|"assistant"|"tool", "content": …}, …],
 *         "tools"?: […], "parallel_tool_calls"?: bool, "functions"?: […]}
 *        content is a string or an array of content parts ({"type":"text","text":…} or, on user
 *        messages, {"type":"image_url","image_url":{"url":…}}); an assistant message may carry
 *        `weight` 0 or 1 and may replace its content by `tool_calls`/`function_call`; at least one
 *        assistant message.
 *   dpo  {"input": {"messages": […], "tools"?, "parallel_tool_calls"?},
 *         "preferred_output": [assistant messages], "non_preferred_output": [assistant messages]}
 *        (the older names `preferred_completion`/`non_preferred_completion` are accepted too).
 *   rft  {"messages": […ending with a user (or developer) turn], any other fields: the item the grader
 *         reads as {{item.*}}}.
 *
 * Told the format (from a job's method) every line must have it; otherwise (at upload) the first line
 * decides: `input` or a preferred/non-preferred field means dpo, messages whose last turn is the
 * user's mean rft, other messages sft; every later line must then have the same format.
 *
 * Errors name the 1-based line and the field path, PostgreSQL style:
 *   line 12: messages[2].role: expected one of "system", "developer", "user", "assistant", "tool"
 * A file is read as a stream (validate_stream_*), so an upload assembled from parts in the object store
 * is checked without holding it whole; `validate_jsonl` does the same for a buffer. A UTF-8 byte-order
 * mark before the first line (Windows editors write one) is skipped; lines may end in CRLF. */
#ifndef WHET_GATEWAY_VALIDATE_H
#define WHET_GATEWAY_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

enum validate_format {
    VALIDATE_FORMAT_AUTO = 0, /* detect from the first line */
    VALIDATE_FORMAT_SFT,
    VALIDATE_FORMAT_DPO,
    VALIDATE_FORMAT_RFT,
};
#define VALIDATE_FORMAT_COUNT 4

/* "sft", "dpo", "rft" ("auto" for VALIDATE_FORMAT_AUTO), as stored in files.format. */
const char *validate_format_name(enum validate_format format);
/* The format a fine-tuning method trains on: "supervised" -> sft, "dpo" -> dpo, "reinforcement" -> rft;
 * VALIDATE_FORMAT_AUTO for anything else. */
enum validate_format validate_format_for_method(const char *method_type);
/* Parses a stored files.format value; VALIDATE_FORMAT_AUTO when unknown or NULL. */
enum validate_format validate_format_parse(const char *name);

/* Bounds that keep a hostile upload from costing more than it should. Zero fields take the defaults. */
struct validate_limits {
    size_t max_line_bytes;  /* default 4 MiB: one example */
    size_t max_lines;       /* default 5,000,000 */
    uint64_t max_total_bytes; /* default 8 GiB (OpenAI's Uploads limit) */
    size_t min_lines;       /* default 1 */
};
#define VALIDATE_DEFAULT_MAX_LINE_BYTES ((size_t)4 << 20)
#define VALIDATE_DEFAULT_MAX_LINES ((size_t)5000000)
#define VALIDATE_DEFAULT_MAX_TOTAL_BYTES ((uint64_t)8 << 30)

/* What a valid file holds. */
struct validate_summary {
    enum validate_format format;  /* the format of every line */
    size_t lines;                 /* examples (non-empty lines) */
    size_t per_format[VALIDATE_FORMAT_COUNT]; /* lines of each format, indexed by enum validate_format */
    uint64_t bytes;               /* bytes read */
};

/* Checks one line (without its newline) against `expect` (AUTO: any format) and reports the format it
 * has. Errors name the field, not the line (the caller knows it). */
int validate_line(const char *line, size_t len, enum validate_format expect, enum validate_format *found,
                  struct whet_err *err);

/* Streaming validation: feed the bytes in any chunking, then finish. After an error the stream stays
 * failed (further feeds return -1 with the same message). */
struct validate_stream;
struct validate_stream *validate_stream_new(enum validate_format expect, const struct validate_limits *limits);
int validate_stream_feed(struct validate_stream *stream, const void *data, size_t len, struct whet_err *err);
int validate_stream_finish(struct validate_stream *stream, struct validate_summary *out, struct whet_err *err);
void validate_stream_free(struct validate_stream *stream);

/* The whole of a file in one buffer. */
int validate_jsonl(const void *data, size_t len, enum validate_format expect, const struct validate_limits *limits,
                   struct validate_summary *out, struct whet_err *err);

/* validate_jsonl with the work split over up to `threads` threads (slices of whole lines, each at
 * least `min_slice_bytes`), for large uploads. The answer is the same as validate_jsonl's, errors
 * included: a file that fails anywhere is checked again serially for the exact message. */
int validate_jsonl_parallel(const void *data, size_t len, enum validate_format expect,
                            const struct validate_limits *limits, int threads, size_t min_slice_bytes,
                            struct validate_summary *out, struct whet_err *err);

#endif
