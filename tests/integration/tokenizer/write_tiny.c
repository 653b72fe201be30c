/* write_tiny.c - `tokenizer_write_tiny DIR [VOCAB]`: writes the tiny tokenizer, so the transformers.js
 * comparison can load the same files whet generates (until `whet model init` exists to do it). */
#include <stdio.h>
#include <stdlib.h>

#include "tokenizer.h"

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: tokenizer_write_tiny DIR [VOCAB]\n");
        return 2;
    }
    struct whet_err err;
    if (tokenizer_write_tiny(argv[1], argc == 3 ? atoi(argv[2]) : TOKENIZER_TINY_VOCAB, &err) < 0) {
        fprintf(stderr, "tokenizer_write_tiny: %s\n", err.msg);
        return 1;
    }
    return 0;
}
