/* devices.c - what an executor offers: the --devices SPEC. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

/* Visible CUDA GPUs through nvidia-smi, so the executor needs no CUDA library to describe them. */
static int detect_cuda(struct agent_device *out, int max, struct whet_err *err) {
    FILE *p = popen("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>/dev/null", "r");
    if (!p) return whet_errf(err, "--devices cuda: cannot run nvidia-smi");
    char line[256];
    int n = 0;
    while (n < max && fgets(line, sizeof line, p)) {
        char *comma = strrchr(line, ',');
        if (!comma) continue;
        *comma = 0;
        /* "NVIDIA H200" -> "H200": the last word names the type, as placement constraints do. */
        char *name = strrchr(line, ' ');
        name = name ? name + 1 : line;
        snprintf(out[n].type, sizeof out[n].type, "%.31s", name);
        out[n].memory_mib = (uint32_t)strtoul(comma + 1, NULL, 10);
        n++;
    }
    pclose(p);
    if (n == 0) {
        whet_errf(err, "--devices cuda: no CUDA device");
        return whet_err_hint(err, "use cpu:N or sim:TYPE:N on machines without GPUs");
    }
    return n;
}

int agent_parse_devices(const char *spec, struct agent_device *out, int max, struct whet_err *err) {
    if (!strcmp(spec, "cuda")) return detect_cuda(out, max, err);
    char type[32] = "cpu";
    long n = 0, gib = 0;
    char *end;
    if (!strncmp(spec, "cpu:", 4)) {
        n = strtol(spec + 4, &end, 10);
        if (*end) n = 0;
    } else if (!strncmp(spec, "sim:", 4)) {
        const char *t = spec + 4, *colon = strchr(t, ':');
        if (colon && colon > t && (size_t)(colon - t) < sizeof type) {
            memcpy(type, t, (size_t)(colon - t));
            type[colon - t] = 0;
            n = strtol(colon + 1, &end, 10);
            if (*end == ':') gib = strtol(end + 1, &end, 10);
            if (*end || gib < 0) n = 0;
        }
    } else {
        return whet_errf(err, "--devices \"%s\": expected cuda, cpu:N or sim:TYPE:N[:GIB]", spec);
    }
    if (n < 1 || n > max)
        return whet_errf(err, "--devices \"%s\": expected cuda, cpu:N or sim:TYPE:N[:GIB] with 1 <= N <= %d", spec, max);
    for (int i = 0; i < n; i++) {
        snprintf(out[i].type, sizeof out[i].type, "%s", type);
        out[i].memory_mib = (uint32_t)(gib * 1024);
    }
    return (int)n;
}
