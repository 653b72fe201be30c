/* backend_cpu.h - what the CPU backend's files share (backend_cpu.c holds the op table). */
#ifndef WHET_BACKEND_CPU_H
#define WHET_BACKEND_CPU_H

#include "backend.h"

/* backend_cpu_sample.c: the `sample` op. */
void cpu_sample(struct backend *be, const struct sample_out *out, float *logits, const struct sample_row *rows, int n,
                int V);

#endif
