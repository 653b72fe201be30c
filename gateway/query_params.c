/* query_params.c - integer query parameters (see query_params.h). */
#include "query_params.h"

#include <errno.h>
#include <stdlib.h>

int query_int(struct gw_req *r, const char *name, long long min, long long max, long long def, long long *out) {
    const char *s = http_query_param(r, name);
    *out = def;
    if (!s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < min || v > max) {
        http_reply_error(r, 400, name, "invalid_value", "%s: expected an integer in %lld..%lld, got \"%s\"", name, min,
                         max, s);
        return -1;
    }
    *out = v;
    return 1;
}

const char *query_int_text(struct gw_req *r, int present, long long v) {
    return present > 0 ? http_printf(r, "%lld", v) : NULL;
}
