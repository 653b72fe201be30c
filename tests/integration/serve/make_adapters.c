/* make_adapters.c - writes N PEFT adapters with random weights for a model, for the serving tests:
 *   make_adapters MODEL_DIR OUT_PREFIX N   ->  OUT_PREFIX0 … OUT_PREFIX{N-1}
 * (ranks 4 and 8; every fourth on q, v and down only, the others on all linear layers). */
#include <stdio.h>
#include <stdlib.h>

#include "model.h"
#include "tiny_models.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: make_adapters MODEL_DIR OUT_PREFIX N\n");
        return 2;
    }
    int n = atoi(argv[3]);
    for (int k = 0; k < n; k++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s%d", argv[2], k);
        struct whet_err err;
        unsigned targets = k % 4 == 3 ? LORA_Q | LORA_V | LORA_DOWN : LORA_ALL;
        if (random_adapter_write(argv[1], dir, k % 2 ? 4 : 8, targets, 1000 + (uint64_t)k, 0.08f, &err)) {
            fprintf(stderr, "make_adapters: %s: %s\n", dir, err.msg);
            return 1;
        }
    }
    return 0;
}
