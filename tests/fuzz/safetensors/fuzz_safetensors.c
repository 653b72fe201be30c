/* fuzz_safetensors.c - libFuzzer target: any byte string given to st_parse either fails with a
 * message or yields tensors whose bytes lie inside the input, which are then all read as f32 (so an
 * offset the validator let through out of bounds is caught by AddressSanitizer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy: ASan then knows exactly where the input ends. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    struct st_set set;
    struct whet_err err;
    if (st_parse(&set, buf, size, "fuzz.safetensors", &err) == 0) {
        for (int i = 0; i < set.n_tensors; i++) {
            const struct st_tensor *t = &set.tensors[i];
            if (t->numel > (1 << 20)) continue;
            float *out = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
            if (out) st_read_f32(t, out, -1, &err);
            free(out);
            (void)st_find(&set, t->name);
        }
        (void)st_metadata(&set, "format");
        st_close(&set);
    } else if (!memchr(err.msg, 0, sizeof err.msg) || strncmp(err.msg, "fuzz.safetensors", 16) != 0) {
        abort(); /* every error names the file */
    }
    free(buf);
    return 0;
}
