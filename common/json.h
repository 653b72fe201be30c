/* json.h - small helpers around jansson shared by every parser of tenant JSON. */
#ifndef WHET_JSON_H
#define WHET_JSON_H

#include <jansson.h>

/* What a value is, for error messages in OpenAI's wording: "an object", "an array", "a string",
 * "an integer", "a number", "a boolean" or "null". */
const char *whet_json_kind(const json_t *v);

#endif
