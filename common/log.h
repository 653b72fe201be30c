/* log.h - one structured line per event on stderr: `ts=… level=… comp=… msg="…" key=value …`.
 *
 * Components set their name once (whet_log_component); the level comes from WHET_LOG_LEVEL
 * (debug, info, warn, error; default info). Lines are written with a single write(2), so lines from
 * several threads never interleave. */
#ifndef WHET_LOG_H
#define WHET_LOG_H

enum whet_log_level { WHET_LOG_DEBUG, WHET_LOG_INFO, WHET_LOG_WARN, WHET_LOG_ERROR };

void whet_log_component(const char *name);
void whet_log(enum whet_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) whet_log(WHET_LOG_DEBUG, __VA_ARGS__)
#define log_info(...) whet_log(WHET_LOG_INFO, __VA_ARGS__)
#define log_warn(...) whet_log(WHET_LOG_WARN, __VA_ARGS__)
#define log_error(...) whet_log(WHET_LOG_ERROR, __VA_ARGS__)

#endif
