/* query_params.h - integer query parameters of the metric series and billing routes (after_step,
 * limit, max_points, start_time, ...): a bad value is a 400 that names the parameter and the range it
 * must be in, never a 500. */
#ifndef WHET_GATEWAY_QUERY_PARAMS_H
#define WHET_GATEWAY_QUERY_PARAMS_H

#include "http.h"

/* The query parameter `name` as an integer in min..max. Returns 1 with it in *out, 0 when absent (*out
 * is `def`), or -1 having answered 400 (param `name`). */
int query_int(struct gw_req *r, const char *name, long long min, long long max, long long def, long long *out);

/* query_int's value as text for a statement parameter: NULL when absent, else the decimal text in the
 * request's pool. */
const char *query_int_text(struct gw_req *r, int present, long long v);

#endif
