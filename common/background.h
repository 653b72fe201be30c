/* background.h - a service's background thread that its owner can stop at any moment.
 *
 * The thread waits only through background_wait(), a poll() that also watches an eventfd
 * background_stop() writes, so a stop never waits out a sleep or a silent peer; the thread's function
 * returns once background_wait() says -1. (whet_pg_connect_stoppable() in pg.h connects to PostgreSQL
 * the same way.) */
#ifndef WHET_BACKGROUND_H
#define WHET_BACKGROUND_H

#include <pthread.h>

struct background {
    pthread_t tid;
    int stop_fd; /* eventfd: readable once background_stop() has run */
};

/* Starts main(arg) on its own thread; -1 (nothing to undo) when the thread or its eventfd cannot be had. */
int background_start(struct background *b, void *(*main)(void *), void *arg);
/* Tells the thread to stop, waits for it to return and releases what background_start() took. */
void background_stop(struct background *b);
/* Waits until fd (none when -1) is ready for `events` or timeout_ms pass (-1: no limit). Returns 1 when fd is
 * ready, 0 on timeout, -1 when the thread is told to stop (or poll() fails: there is nothing left to wait on). */
int background_wait(const struct background *b, int fd, short events, int timeout_ms);

#endif
