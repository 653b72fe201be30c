/* background.c - a background thread with a stop eventfd (see background.h). */
#include "background.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

int background_start(struct background *b, void *(*main)(void *), void *arg) {
    b->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (b->stop_fd < 0) return -1;
    if (pthread_create(&b->tid, NULL, main, arg) != 0) {
        close(b->stop_fd);
        return -1;
    }
    return 0;
}

void background_stop(struct background *b) {
    uint64_t one = 1;
    ssize_t w = write(b->stop_fd, &one, sizeof one);
    (void)w; /* an eventfd counter cannot overflow with one write */
    pthread_join(b->tid, NULL);
    close(b->stop_fd);
}

int background_wait(const struct background *b, int fd, short events, int timeout_ms) {
    struct pollfd p[2] = {{.fd = b->stop_fd, .events = POLLIN}, {.fd = fd, .events = events}};
    for (;;) {
        int n = poll(p, fd >= 0 ? 2 : 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || p[0].revents) return -1;
        return n > 0;
    }
}
