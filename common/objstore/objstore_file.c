/* objstore_file.c - the file:// object store: one file per object under a root directory.
 *
 * Writes go to a temp file in the object's own directory (".NAME.objstore-tmp.XXXXXX"), which gets
 * the SHA-256 as the extended attribute user.whet.sha256, is fsynced and then renamed over the key's
 * path, and the directory is fsynced too: a reader or a crash sees the old object or the new one,
 * never part of one, and a manifest renamed after its files is durable after them. Listing skips temp
 * files. On file systems without user extended attributes objects simply carry no checksum, and
 * whole-object reads cannot verify them (manifests still can). Unlike S3, a key cannot be both an
 * object and the folder of others ("a" and "a/b"); whet's keys never are. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "objstore_impl.h"

#define SHA_XATTR "user.whet.sha256"
#define TEMP_MARK ".objstore-tmp."
#define IO_CHUNK (1u << 20)

struct file_store {
    struct objstore base;
    char *root; /* absolute, without a trailing '/' */
};

static char *object_path(struct objstore *store, const char *key) {
    return xasprintf("%s/%s", ((struct file_store *)store)->root, key);
}

/* ---------------------------------------------------------------------------------------------- */
/* Writing                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* Opens a temp file beside the object's path, creating the parent directories. */
static int temp_open(const char *path, char **tmp_path, char **dir_path, struct whet_err *err) {
    const char *slash = strrchr(path, '/');
    char *dir = xmalloc((size_t)(slash - path) + 1);
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = 0;
    if (whet_mkdir_p(dir, err) != 0) {
        free(dir);
        return -1;
    }
    char *tmp = xasprintf("%s/.%s" TEMP_MARK "XXXXXX", dir, slash + 1);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        whet_errf(err, "%s: %s", tmp, strerror(errno));
        free(tmp);
        free(dir);
        return -1;
    }
    /* mkostemp makes 0600 files; objects are as readable as the store directory lets them be. */
    fchmod(fd, 0644);
    *tmp_path = tmp;
    *dir_path = dir;
    return fd;
}

/* Records the checksum, makes the bytes durable and renames the temp file into place; closes `fd`
 * and removes the temp file on failure. */
static int temp_commit(int fd, const char *tmp, const char *dir, const char *path, const char *sha256,
                       struct whet_err *err) {
    int rc = 0;
    /* the checksum is kept where it can be: not on a file system without xattrs, nor from inside the trainers'
     * sandbox, whose seccomp filter refuses xattr writes (EPERM); reads then check manifests alone */
    if (fsetxattr(fd, SHA_XATTR, sha256, 64, 0) != 0 && errno != ENOTSUP && errno != EPERM)
        rc = whet_errf(err, "%s: setting %s: %s", tmp, SHA_XATTR, strerror(errno));
    if (rc == 0 && fsync(fd) != 0) rc = whet_errf(err, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0) rc = whet_errf(err, "%s: close: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = whet_errf(err, "%s: rename: %s", path, strerror(errno));
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
        fsync(dir_fd);
        close(dir_fd);
    }
    return 0;
}

static int file_put(struct objstore *store, const char *key, const void *data, size_t len, const char *sha256,
                    struct whet_err *err) {
    char *path = object_path(store, key), *tmp = NULL, *dir = NULL;
    int fd = temp_open(path, &tmp, &dir, err);
    int rc = -1;
    if (fd >= 0) {
        if (whet_write_all(fd, data, len) != 0) {
            whet_errf(err, "%s: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
        } else {
            rc = temp_commit(fd, tmp, dir, path, sha256, err);
        }
    }
    free(path);
    free(tmp);
    free(dir);
    return rc;
}

static int file_put_file(struct objstore *store, const char *key, const char *src, const char *sha256,
                         struct whet_err *err) {
    int in_fd = open(src, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) return whet_errf(err, "%s: %s", src, strerror(errno));
    char *path = object_path(store, key), *tmp = NULL, *dir = NULL;
    int fd = temp_open(path, &tmp, &dir, err);
    int rc = fd >= 0 ? 0 : -1;
    char *buf = xmalloc(IO_CHUNK);
    /* Hash what is copied when the caller has no checksum, so the object describes its own bytes. */
    EVP_MD_CTX *sha = sha256 ? NULL : objstore_sha_begin();
    while (rc == 0) {
        ssize_t n = read(in_fd, buf, IO_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) rc = whet_errf(err, "%s: %s", src, strerror(errno));
        if (n <= 0) break;
        if (sha) objstore_sha_update(sha, buf, (size_t)n);
        if (whet_write_all(fd, buf, (size_t)n) != 0) rc = whet_errf(err, "%s: %s", tmp, strerror(errno));
    }
    char computed[65];
    if (sha) objstore_sha_end(sha, computed);
    if (rc == 0) {
        rc = temp_commit(fd, tmp, dir, path, sha256 ? sha256 : computed, err);
    } else if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    free(buf);
    close(in_fd);
    free(path);
    free(tmp);
    free(dir);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reading                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* Opens the object's file; OBJSTORE_NOT_FOUND when the key names nothing or a directory. */
static int object_open(struct objstore *store, const char *key, int *fd_out, struct objstore_info *info,
                       struct whet_err *err) {
    char *path = object_path(store, key);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(path);
        if (e == ENOENT || e == ENOTDIR) return OBJSTORE_NOT_FOUND;
        return whet_errf(err, "object \"%s\": %s", key, strerror(e));
    }
    free(path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return OBJSTORE_NOT_FOUND;
    }
    info->size = (uint64_t)st.st_size;
    /* The attribute is read from the open file, so it belongs to the bytes about to be read even if
     * the object is replaced meanwhile. */
    ssize_t n = fgetxattr(fd, SHA_XATTR, info->sha256, 64);
    info->sha256[n == 64 ? 64 : 0] = 0;
    *fd_out = fd;
    return 0;
}

static int file_read(struct objstore *store, const char *key, uint64_t offset, uint64_t length,
                     objstore_sink_fn sink, void *ctx, struct objstore_info *info, struct whet_err *err) {
    int fd = -1;
    int rc = object_open(store, key, &fd, info, err);
    if (rc != 0) return rc;
    /* As on S3: a range must start inside the object (offset 0 of an empty one is the whole of it). */
    if ((offset && offset >= info->size) || (length && length > info->size - offset)) {
        close(fd);
        return whet_errf(err, "object \"%s\": range %llu+%llu is past its end (%llu bytes)", key,
                         (unsigned long long)offset, (unsigned long long)length, (unsigned long long)info->size);
    }
    uint64_t left = length ? length : info->size - offset;
    size_t cap = left < IO_CHUNK ? (size_t)left : IO_CHUNK;
    char *buf = xmalloc(cap ? cap : 1);
    while (left && rc == 0) {
        ssize_t n = pread(fd, buf, left < cap ? (size_t)left : cap, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = whet_errf(err, "object \"%s\": %s", key, strerror(errno));
        } else if (n == 0) {
            rc = whet_errf(err, "object \"%s\": file shrank while being read", key);
        } else if (sink(ctx, buf, (size_t)n) != 0) {
            rc = whet_errf(err, "object \"%s\": read stopped by the receiver", key);
        } else {
            offset += (uint64_t)n;
            left -= (uint64_t)n;
        }
    }
    free(buf);
    close(fd);
    return rc;
}

static int file_stat(struct objstore *store, const char *key, struct objstore_info *info, struct whet_err *err) {
    int fd = -1;
    int rc = object_open(store, key, &fd, info, err);
    if (rc == 0) close(fd);
    return rc;
}

static int file_delete(struct objstore *store, const char *key, struct whet_err *err) {
    char *path = object_path(store, key);
    int rc = 0;
    if (unlink(path) != 0 && errno != ENOENT && errno != ENOTDIR)
        rc = whet_errf(err, "object \"%s\": %s", key, strerror(errno));
    free(path);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Listing                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

struct listed {
    char *key;
    uint64_t size;
};

struct listing {
    struct listed *items;
    size_t len, cap;
};

static int listed_cmp(const void *a, const void *b) {
    return strcmp(((const struct listed *)a)->key, ((const struct listed *)b)->key);
}

/* Walks root/`rel` (rel "" or "dir/sub/"), adding the files whose keys start with `prefix`. */
static int walk(const char *root, const char *rel, const char *prefix, struct listing *out, struct whet_err *err) {
    char *dir_path = xasprintf("%s/%s", root, rel);
    DIR *dir = opendir(dir_path);
    if (!dir) {
        int e = errno;
        free(dir_path);
        /* A prefix whose directory does not exist lists nothing. */
        return e == ENOENT || e == ENOTDIR ? 0 : whet_errf(err, "%s/%s: %s", root, rel, strerror(e));
    }
    size_t rel_len = strlen(rel), prefix_len = strlen(prefix);
    int rc = 0;
    struct dirent *ent;
    while (rc == 0 && (ent = readdir(dir)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) continue;
        if (ent->d_name[0] == '.' && strstr(ent->d_name, TEMP_MARK)) continue;
        char *key = xasprintf("%s%s", rel, ent->d_name);
        size_t key_len = rel_len + strlen(ent->d_name);
        /* Descend only where keys can still match: the key is a prefix of `prefix` or the reverse. */
        size_t common = key_len < prefix_len ? key_len : prefix_len;
        struct stat st;
        if (strncmp(key, prefix, common) == 0 && fstatat(dirfd(dir), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (S_ISDIR(st.st_mode)) {
                char *sub = xasprintf("%s/", key);
                rc = walk(root, sub, prefix, out, err);
                free(sub);
            } else if (S_ISREG(st.st_mode) && key_len >= prefix_len) {
                if (out->len == out->cap) {
                    out->cap = out->cap ? out->cap * 2 : 64;
                    out->items = xrealloc(out->items, out->cap * sizeof *out->items);
                }
                out->items[out->len++] = (struct listed){key, (uint64_t)st.st_size};
                key = NULL;
            }
        }
        free(key);
    }
    closedir(dir);
    free(dir_path);
    return rc;
}

static int file_list(struct objstore *store, const char *prefix, objstore_list_fn fn, void *ctx,
                     struct whet_err *err) {
    struct listing found = {0};
    int rc = walk(((struct file_store *)store)->root, "", prefix, &found, err);
    if (rc == 0) {
        /* S3 lists in byte order of whole keys, which a directory walk does not give ("a/b" vs "a-b"). */
        if (found.len) qsort(found.items, found.len, sizeof *found.items, listed_cmp);
        for (size_t i = 0; i < found.len; i++)
            if (fn(ctx, found.items[i].key, found.items[i].size) != 0) break;
    }
    for (size_t i = 0; i < found.len; i++) free(found.items[i].key);
    free(found.items);
    return rc;
}

static void file_close(struct objstore *store) {
    free(((struct file_store *)store)->root);
    free(store);
}

static const struct objstore_ops file_ops = {
    .put = file_put,
    .put_file = file_put_file,
    .read = file_read,
    .stat = file_stat,
    .delete = file_delete,
    .list = file_list,
    .close = file_close,
};

int objstore_file_open(const char *root, struct objstore **out, struct whet_err *err) {
    size_t len = strlen(root);
    while (len > 1 && root[len - 1] == '/') len--;
    char *copy = xmalloc(len + 1);
    memcpy(copy, root, len);
    copy[len] = 0;
    if (whet_mkdir_p(copy, err) != 0) {
        free(copy);
        return whet_err_prefix(err, "object store");
    }
    struct file_store *store = xcalloc(1, sizeof *store);
    store->base.ops = &file_ops;
    store->root = copy;
    *out = &store->base;
    return 0;
}
