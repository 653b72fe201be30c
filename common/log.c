/* log.c - see log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *component = "whet";
static int min_level = -1;

void whet_log_component(const char *name) { component = name; }

static int level_from_env(void) {
    const char *s = getenv("WHET_LOG_LEVEL");
    if (!s) return WHET_LOG_INFO;
    if (!strcmp(s, "debug")) return WHET_LOG_DEBUG;
    if (!strcmp(s, "warn")) return WHET_LOG_WARN;
    if (!strcmp(s, "error")) return WHET_LOG_ERROR;
    return WHET_LOG_INFO;
}

void whet_log(enum whet_log_level level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (min_level < 0) min_level = level_from_env();
    if ((int)level < min_level) return;

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s comp=%s ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                     names[level], component);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
