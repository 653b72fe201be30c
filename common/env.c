/* env.c - see env.h. */
#include "env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int whet_env_load(const char *path, int optional, struct whet_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (optional && errno == ENOENT) return 0;
        return whet_errf(err, "%s: %s", path, strerror(errno));
    }
    char line[8192];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        char *eq = strchr(p, '=');
        if (!eq || eq == p) {
            fclose(f);
            return whet_errf(err, "%s:%d: expected KEY=VALUE", path, lineno);
        }
        *eq = 0;
        setenv(p, eq + 1, 0);
    }
    fclose(f);
    return 0;
}

int whet_env_load_data_dir(const char *data_dir, struct whet_err *err) {
    if (!data_dir) data_dir = getenv("WHET_DATA_DIR");
    if (!data_dir || !*data_dir) return 0;
    char *path = xasprintf("%s/whet.env", data_dir);
    int rc = whet_env_load(path, 1, err);
    free(path);
    if (rc == 0) setenv("WHET_DATA_DIR", data_dir, 0);
    return rc;
}

const char *whet_env(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}
