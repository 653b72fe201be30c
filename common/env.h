/* env.h - configuration from the environment and from DIR/whet.env.
 *
 * Every component reads its settings (DESIGN.md, "Environment") through whet_env(). `whet up` writes
 * DIR/whet.env as KEY=VALUE lines; other subcommands load it when WHET_DATA_DIR or --data-dir names
 * DIR. Variables already in the environment win over the file, so an operator can override one. */
#ifndef WHET_ENV_H
#define WHET_ENV_H

#include "util.h"

/* Loads KEY=VALUE lines (blank lines and '#' comments allowed) into the environment without
 * overwriting variables that are already set. A missing file is not an error when `optional`. */
int whet_env_load(const char *path, int optional, struct whet_err *err);
/* Loads DIR/whet.env for DIR = `data_dir`, or $WHET_DATA_DIR when `data_dir` is NULL. */
int whet_env_load_data_dir(const char *data_dir, struct whet_err *err);
/* getenv with a default for unset or empty variables. */
const char *whet_env(const char *name, const char *fallback);

#endif
