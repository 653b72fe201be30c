/* tiny_models.h - models for tests of the engine: the tiny preset in a fresh temporary dir, and PEFT
 * adapters with random weights (PEFT starts B at zero, which makes a fresh adapter the base model;
 * these draw B too). */
#ifndef WHET_TEST_TINY_MODELS_H
#define WHET_TEST_TINY_MODELS_H

#include <stdint.h>

#include "util.h"

/* Makes root (a mkdtemp template such as "/tmp/whet-x-XXXXXX", replaced by the dir made) and writes
 * `whet model init --preset tiny` into model_dir = ROOT/model (model_dir holds 128 bytes). */
int tiny_model_write(char *root, char *model_dir, struct whet_err *err);

/* Writes to out_dir an adapter of rank r on `targets` (model.h's LORA_* bits) for the model in
 * model_dir: A as PEFT initialises it from `seed`, B normal with standard deviation b_scale. */
int random_adapter_write(const char *model_dir, const char *out_dir, int r, unsigned targets, uint64_t seed,
                         float b_scale, struct whet_err *err);

#endif
