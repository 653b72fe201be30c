/* model_register.h - `whet model register NAME DIR`: add a base model to the catalog. */
#ifndef WHET_CLI_MODEL_REGISTER_H
#define WHET_CLI_MODEL_REGISTER_H

#include "util.h"

/* The subcommand (argv[0] is "register"). */
int cmd_model_register(int argc, char **argv);
/* Validates the Hugging Face model dir `dir` (config.json, safetensors headers, tokenizer.json), copies
 * it to the object store under models/NAME and adds or replaces the catalog row. Used by `whet up` for
 * the bundled whet-tiny. */
int model_register(const char *database_url, const char *name, const char *dir, struct whet_err *err);

#endif
