/* server_workers.c - a small pool of threads for blocking work (object store I/O), so that no event
 * loop ever blocks. http_run_blocking() queues a job; a worker runs it and posts it back to the
 * request's loop through h2o's multithread queue, where `done` runs on the loop thread. A job holds a
 * reference on its request, so the request outlives the client if need be (`done` then sees
 * http_gone()). */
#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "server.h"
#include "util.h"

#define JOBS_MAX 1024

struct gw_job {
    h2o_multithread_message_t super;
    struct gw_job *next;
    struct gw_req *r;
    struct gw_thread *thread;
    void (*work)(void *arg);
    void (*done)(struct gw_req *r, void *arg);
    void *arg;
};

struct gw_workers {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct gw_job *head, **tail;
    size_t queued;
    int stop;
    int n;
    pthread_t *tids;
};

static void *worker_main(void *arg) {
    struct gw_workers *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->head) break; /* stopping and nothing left */
        struct gw_job *job = w->head;
        w->head = job->next;
        if (!w->head) w->tail = &w->head;
        w->queued--;
        pthread_mutex_unlock(&w->mu);
        job->work(job->arg);
        pthread_mutex_lock(&w->mu);
        /* A loop that already stopped (after its grace period) has no receiver any more. */
        if (job->thread->receiver_closed) {
            log_warn("msg=\"blocking job finished after its event loop stopped; dropped\"");
            free(job);
        } else {
            h2o_multithread_send_message(&job->thread->receiver, &job->super);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

struct gw_workers *gw_workers_new(int nthreads) {
    struct gw_workers *w = xcalloc(1, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->tail = &w->head;
    w->n = nthreads;
    w->tids = xcalloc((size_t)nthreads, sizeof(pthread_t));
    for (int i = 0; i < nthreads; i++) pthread_create(&w->tids[i], NULL, worker_main, w);
    return w;
}

void gw_workers_free(struct gw_workers *w) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->n; i++) pthread_join(w->tids[i], NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->tids);
    free(w);
}

void gw_workers_close_loop(struct gw_workers *w, struct gw_thread *t) {
    pthread_mutex_lock(&w->mu);
    t->receiver_closed = 1;
    pthread_mutex_unlock(&w->mu);
}

int http_run_blocking(struct gw_req *r, void (*work)(void *arg), void (*done)(struct gw_req *r, void *arg), void *arg) {
    struct gw_workers *w = r->thread->gw->workers;
    struct gw_job *job = xcalloc(1, sizeof(*job));
    job->r = r;
    job->thread = r->thread;
    job->work = work;
    job->done = done;
    job->arg = arg;
    pthread_mutex_lock(&w->mu);
    if (w->queued >= JOBS_MAX || w->stop) {
        pthread_mutex_unlock(&w->mu);
        free(job);
        return -1;
    }
    gw_req_retain(r);
    *w->tail = job;
    w->tail = &job->next;
    w->queued++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

int http_run_blocking_or_busy(struct gw_req *r, void (*work)(void *arg), void (*done)(struct gw_req *r, void *arg),
                              void *arg) {
    if (http_run_blocking(r, work, done, arg) == 0) return 0;
    http_reply_unavailable(r, 1, "the gateway's workers are busy");
    return -1;
}

void gw_workers_on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages) {
    while (!h2o_linklist_is_empty(messages)) {
        struct gw_job *job = H2O_STRUCT_FROM_MEMBER(struct gw_job, super.link, messages->next);
        h2o_linklist_unlink(&job->super.link);
        job->done(job->r, job->arg);
        gw_req_release(job->r);
        free(job);
    }
}
