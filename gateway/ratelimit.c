/* ratelimit.c - per-tenant token buckets (tenants.rate_per_s, tenants.rate_burst), shared by every
 * event loop: SO_REUSEPORT spreads one tenant's connections over all threads, so a bucket per thread
 * would multiply the limit by the thread count. One mutex guards a small chained hash table; the
 * critical section is a few arithmetic operations. Buckets live as long as the process (one per
 * tenant that ever called). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "util.h"

#define BUCKET_SLOTS 1024

struct bucket {
    struct bucket *next;
    char tenant[HTTP_TENANT_ID_MAX + 1];
    double tokens;
    double last;  /* whet_now_mono() of the last refill */
    double burst; /* the capacity last applied */
};

static struct bucket *slots[BUCKET_SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned hash_str(const char *s) {
    unsigned h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int ratelimit_take(const char *tenant_id, double rate_per_s, double burst, double now, double *retry_after_s) {
    unsigned slot = hash_str(tenant_id) % BUCKET_SLOTS;
    pthread_mutex_lock(&lock);
    struct bucket *b = slots[slot];
    while (b && strcmp(b->tenant, tenant_id)) b = b->next;
    if (!b) {
        b = xcalloc(1, sizeof(*b));
        snprintf(b->tenant, sizeof(b->tenant), "%s", tenant_id);
        b->tokens = burst;
        b->burst = burst;
        b->last = now;
        b->next = slots[slot];
        slots[slot] = b;
    }
    double elapsed = now - b->last;
    if (elapsed > 0) b->tokens += elapsed * rate_per_s;
    /* A raised burst adds its increase at once (an operator raising a limit means now); a lowered one
     * caps the tokens at once. */
    if (burst > b->burst) b->tokens += burst - b->burst;
    b->burst = burst;
    if (b->tokens > burst) b->tokens = burst;
    b->last = now;
    int allowed = b->tokens >= 1.0;
    if (allowed) b->tokens -= 1.0;
    else *retry_after_s = (1.0 - b->tokens) / rate_per_s;
    pthread_mutex_unlock(&lock);
    return allowed;
}

void ratelimit_reset_all(void) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < BUCKET_SLOTS; i++) {
        while (slots[i]) {
            struct bucket *b = slots[i];
            slots[i] = b->next;
            free(b);
        }
    }
    pthread_mutex_unlock(&lock);
}
