/* dir_cache.h - a directory of cached directories bounded in size: the executor's base and judge models
 * (WORK_DIR/models), the gateway's judge models (judge-cache). When a new entry pushes the cache past its
 * bound, the least recently used entries are removed, never one in use and never the most recently used
 * (a model larger than the bound alone is kept, with a warning: the job that fetched it needs it).
 *
 *   ROOT/NAME/       an entry, complete: filled as ROOT/NAME.partial, then renamed
 *   ROOT/.NAME.use   its use file: its mtime is when the entry was last taken or given back (so recency
 *                    survives a restart), and whoever uses the entry holds a shared flock(2) on it, which
 *                    an eviction's exclusive, non-blocking lock cannot get: correct across threads and
 *                    processes alike (gateways without a data dir share one cache under TMPDIR)
 *   ROOT/.lock       held exclusively while an entry is filled and the cache pruned: one fill at a time,
 *                    so a NAME.partial seen under it is a crash's leftover and is removed
 *
 * Within a process the entries it holds are counted under the cache's mutex: the first reference takes
 * the use file's shared lock, the last gives it back.
 *
 * dir_cache_choose() and dir_cache_parse_bound() are pure (no I/O): the policy, tested alone. The rest is
 * the thin layer over the file system. */
#ifndef WHET_DIR_CACHE_H
#define WHET_DIR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* ---- The policy (pure) ---- */

struct dir_cache_entry {
    const char *name;
    uint64_t bytes;
    int64_t last_used_ns; /* Unix time */
    int in_use;
    int evict; /* out: dir_cache_choose's verdict */
};

/* Marks for eviction the least recently used entries (ties: by name) until the others fit in max_bytes
 * (0: no bound), passing by those in use and the most recently used one; e keeps its order. Returns the
 * bytes the entries not marked hold. */
uint64_t dir_cache_choose(struct dir_cache_entry *e, size_t n, uint64_t max_bytes);

/* A bound as an operator writes it: SIZE in bytes with an optional K, M, G or T suffix (powers of 1024;
 * "KiB", "MB"… read the same), "0" for none, or N% (1..100) of the file system that holds the cache. */
struct dir_cache_bound {
    uint64_t bytes;
    unsigned percent; /* when set, bytes is 0 and the bound is resolved at dir_cache_open */
};
/* Returns 0, or -1 with err saying what a bound looks like. */
int dir_cache_parse_bound(const char *text, struct dir_cache_bound *out, struct whet_err *err);

/* An entry's name for `id` at `version` (the first version_len characters of it): "ID-VERSION", with
 * every character but [A-Za-z0-9._-] of the id made '_' (a model id may hold '/'). Caller frees. */
char *dir_cache_name(const char *id, const char *version, int version_len);

/* ---- The cache (file system) ---- */

struct dir_cache;

/* Fills `dir` (which does not exist yet) with the entry's contents; returns 0, or -1 with err. */
typedef int (*dir_cache_fill_fn)(void *ctx, const char *dir, struct whet_err *err);

/* Opens the cache at `root` (made when missing) with its bound; `what` names it in log lines ("model
 * cache"). Prunes it once: a smaller bound than last time applies at once, crash leftovers go. NULL
 * with err when the root cannot be made or read. */
struct dir_cache *dir_cache_open(const char *root, const struct dir_cache_bound *bound, const char *what,
                                 struct whet_err *err);
/* Frees the cache (NULL: nothing), letting go of the entries still held. */
void dir_cache_close(struct dir_cache *c);

/* The entry `name`, filled by fill(ctx, …) when it is not there, held until dir_cache_release: returns
 * its path (malloc'd; the caller frees it after releasing), or NULL with err (the fill's). */
char *dir_cache_get(struct dir_cache *c, const char *name, dir_cache_fill_fn fill, void *ctx, struct whet_err *err);
/* Another reference to an entry the caller holds (`dir` as dir_cache_get returned it), for something that
 * may outlive the caller's own use (a co-training process). */
void dir_cache_hold(struct dir_cache *c, const char *dir);
/* Gives a reference back; the entry counts as used now. When the last prune could not get within the
 * bound (entries were in use), prunes again unless a fill is under way (which prunes after it). */
void dir_cache_release(struct dir_cache *c, const char *dir);

/* What the last prune found, and the evictions since open, for metrics. */
struct dir_cache_stats {
    uint64_t bytes, max_bytes, evictions;
};
void dir_cache_get_stats(struct dir_cache *c, struct dir_cache_stats *out);

#endif
