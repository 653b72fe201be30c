/* auth_listen.h - the auth cache invalidated across gateway replicas: a thread LISTENs on the channel
 * whet_auth, which PostgreSQL notifies whenever a key is revoked or removed or a tenant changes or goes
 * (migration 0012), and each notification empties every loop's cache (gw_auth_epoch). So a key revoked
 * through one replica, or in SQL, is refused by every replica within a notification's delivery time
 * instead of the cache TTL. The TTL stays the bound when the listening session is down (it reconnects,
 * emptying the caches again since it may have missed notifications) or turned off
 * (WHET_GATEWAY_AUTH_LISTEN=0: a connection pooler in transaction mode cannot LISTEN). */
#ifndef WHET_GATEWAY_AUTH_LISTEN_H
#define WHET_GATEWAY_AUTH_LISTEN_H

struct auth_listener;

/* Starts the listening thread on `database_url` (copied). Never fails: an unreachable database is
 * retried in the background. */
struct auth_listener *auth_listener_start(const char *database_url);
/* Stops the thread (at once, also while it connects) and frees everything. NULL is a no-op. */
void auth_listener_stop(struct auth_listener *l);

#endif
