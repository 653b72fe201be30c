/* backend.c - backend_open: a device name to an instance of the backend that runs it. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"

void *backend_out_of_memory(struct whet_err *err, const char *what, size_t needed, size_t have) {
    whet_errf(err, "out of %s memory: needed %.2f GiB, have %.2f GiB free", what, (double)needed / (1 << 30),
              (double)have / (1 << 30));
    return NULL;
}

int backend_open(struct backend **out, const char *device, struct whet_err *err) {
    *out = NULL;
    if (!device || !strcmp(device, "cpu")) return backend_cpu_open(out, err);
    int ordinal = 0;
    if (strcmp(device, "cuda")) {
        char *end;
        if (strncmp(device, "cuda:", 5) || !device[5] || (ordinal = (int)strtol(device + 5, &end, 10)) < 0 || *end)
            return whet_errf(err, "device \"%s\": expected cpu, cuda or cuda:N", device);
    }
#ifdef WHET_HAVE_CUDA
    return backend_cuda_open(out, ordinal, err);
#else
    return whet_errf(err, "no CUDA device: this whet was built without the CUDA backend (CMake found no nvcc; "
                          "build with -DWHET_CUDA=ON where the CUDA toolkit is installed), so \"%s\" cannot run",
                     device);
#endif
}
