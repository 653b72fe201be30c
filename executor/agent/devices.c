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

uint32_t agent_take_devices(uint32_t *busy, int n_devices, int want, int *shared) {
    uint32_t mask = 0;
    int got = 0;
    *shared = 0;
    for (int pass = 0; pass < 2 && got < want; pass++) /* free devices first, then busy ones */
        for (int i = 0; i < n_devices && got < want; i++) {
            uint32_t bit = 1u << i;
            if (mask & bit || (pass == 0 && *busy & bit)) continue;
            mask |= bit;
            got++;
            *shared |= pass == 1;
        }
    *busy |= mask;
    return mask;
}

void agent_cuda_grant(struct agent_cuda_grant *g, uint32_t mask) {
    static const char *const shared_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
    int n = 0, len = snprintf(g->visible, sizeof g->visible, "CUDA_VISIBLE_DEVICES=");
    for (size_t i = 0; i < WHET_ARRAY_LEN(shared_nodes); i++) g->nodes[n++] = shared_nodes[i];
    for (int i = 0; i < AGENT_MAX_DEVICES; i++) {
        if (!(mask & (1u << i))) continue;
        len += snprintf(g->visible + len, sizeof g->visible - (size_t)len, "%s%d", n > 3 ? "," : "", i);
        snprintf(g->names[i], sizeof g->names[i], "nvidia%d", i);
        g->nodes[n++] = g->names[i];
    }
    g->nodes[n] = NULL;
}
