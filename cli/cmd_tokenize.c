/* cmd_tokenize.c - `whet tokenize`: text on stdin, token ids on stdout, one JSON array per line.
 *
 * The tests compare its output with transformers.js line for line; the benchmark times it. All the
 * tokenizer logic is in executor/train/tokenizer/tokenizer.c; this file reads lines and writes arrays. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "tokenizer.h"

static void tokenize_usage(FILE *out) {
    fprintf(out,
            "usage: whet tokenize --tokenizer FILE [--json] [--stats]\n\n"
            "Reads texts from stdin, one per line, and prints the token ids of each as a JSON array on a\n"
            "line of its own. No special tokens are added; special-token text in the input (such as\n"
            "<|im_start|>) becomes its id, as Hugging Face does. Invalid UTF-8 is read as U+FFFD, one per\n"
            "maximal ill-formed sequence (what TextDecoder and Python's errors=\"replace\" do).\n\n"
            "  --tokenizer FILE  a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen)\n"
            "  --json            each line is a JSON string, so a text may hold newlines; without it a\n"
            "                    line is the text up to, not including, its \"\\n\"\n"
            "  --stats           print to stderr how long loading and tokenizing took, and tokens/s\n");
}

/* Writes "[1,2,3]\n" without stdio's formatting cost per number. */
static void print_ids(FILE *out, const int32_t *ids, size_t n) {
    char buf[16];
    putc_unlocked('[', out);
    for (size_t i = 0; i < n; i++) {
        if (i) putc_unlocked(',', out);
        uint32_t v = (uint32_t)ids[i];
        int k = 0;
        do {
            buf[k++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        while (k) putc_unlocked(buf[--k], out);
    }
    putc_unlocked(']', out);
    putc_unlocked('\n', out);
}

static int cmd_tokenize(int argc, char **argv) {
    static const struct option opts[] = {
        {"tokenizer", required_argument, 0, 't'}, {"json", no_argument, 0, 'j'}, {"stats", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'}, {0}};
    const char *path = NULL;
    int json_lines = 0, stats = 0, c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't': path = optarg; break;
        case 'j': json_lines = 1; break;
        case 's': stats = 1; break;
        case 'h': tokenize_usage(stdout); return 0;
        default: tokenize_usage(stderr); return 2;
        }
    }
    if (!path || optind < argc) {
        fprintf(stderr, "whet tokenize: %s\n", !path ? "--tokenizer FILE is required" : "unexpected argument");
        tokenize_usage(stderr);
        return 2;
    }
    struct whet_err err;
    struct tokenizer *tok;
    double t_start = whet_now_mono();
    if (tokenizer_load(path, &tok, &err) < 0) {
        whet_err_report("whet tokenize", &err);
        return 1;
    }
    struct tokenizer_encoder *enc = tokenizer_encoder_new(tok);
    static char outbuf[1 << 16];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);

    char *line = NULL;
    size_t line_cap = 0, n_ids = 0, ids_cap = 0, line_no = 0;
    int32_t *ids = NULL;
    ssize_t got;
    int rc = 0;
    double t_loaded = whet_now_mono();
    size_t total_tokens = 0;
    while ((got = getline(&line, &line_cap, stdin)) >= 0) {
        line_no++;
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') len--;
        const char *text = line;
        json_t *js = NULL;
        if (json_lines) {
            json_error_t jerr;
            js = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
            if (!js || !json_is_string(js)) {
                fprintf(stderr, "whet tokenize: stdin: line %zu: expected a JSON string%s%s\n", line_no,
                        js ? "" : ": ", js ? "" : jerr.text);
                json_decref(js);
                rc = 1;
                break;
            }
            text = json_string_value(js);
            len = json_string_length(js);
        }
        n_ids = 0;
        if (tokenizer_encoder_encode(enc, text, len, &ids, &n_ids, &ids_cap, &err) < 0) {
            fprintf(stderr, "whet tokenize: stdin: line %zu: %s\n", line_no, err.msg);
            json_decref(js);
            rc = 1;
            break;
        }
        json_decref(js);
        total_tokens += n_ids;
        print_ids(stdout, ids, n_ids);
    }
    if (fflush(stdout) != 0) {
        perror("whet tokenize: stdout");
        rc = 1;
    }
    if (stats) {
        double t_end = whet_now_mono(), secs = t_end - t_loaded;
        fprintf(stderr, "whet tokenize: load %.3f s; %zu texts, %zu tokens in %.3f s (%.0f tokens/s)\n",
                t_loaded - t_start, line_no, total_tokens, secs, secs > 0 ? (double)total_tokens / secs : 0.0);
    }
    free(line);
    free(ids);
    tokenizer_encoder_free(enc);
    tokenizer_free(tok);
    return rc;
}
WHET_COMMAND("tokenize", cmd_tokenize, "print the token ids of text lines (Hugging Face tokenizer.json)")
