/* replica.h - what one gateway process shares with the other replicas behind the load balancer,
 * through one PostgreSQL session of its own, held by a thread:
 *  - the auth cache: the session LISTENs on whet_auth, which PostgreSQL notifies whenever a key is
 *    revoked or removed or a tenant changes or goes (migration 0012); each notification (and each
 *    reconnect, which may have missed some) empties every loop's cache (gw_auth_epoch). A key revoked
 *    through one replica, or in SQL, is refused by every replica within a notification's delivery time
 *    instead of the cache TTL, which stays the bound while the session is down.
 *  - the rate limits, split fairly: the session marks this replica alive in gateway_replicas every
 *    second (migration 0013) and counts the replicas seen in the last few seconds (gw_replicas); each
 *    enforces rate/N and burst/N of a tenant's limits, so the tenant as a whole gets its limits when
 *    the balancer spreads its requests evenly (a tenant pinned to one replica gets that replica's share).
 *    Active-job limits need nothing here: their counter rows are in PostgreSQL (migration 0010).
 * WHET_GATEWAY_REPLICA=0 turns the session off (a pooler in transaction mode cannot LISTEN): the cache
 * TTL bounds revocations and each replica enforces the whole limits. */
#ifndef WHET_GATEWAY_REPLICA_H
#define WHET_GATEWAY_REPLICA_H

struct replica;

/* Starts the thread on `database_url` (copied). Never fails for want of the database: an unreachable
 * one is retried in the background. NULL (logged) only when the thread cannot start. */
struct replica *replica_start(const char *database_url);
/* Stops the thread (at once, also while it connects), forgets this replica in gateway_replicas when
 * the session is up, and frees everything. NULL is a no-op. */
void replica_stop(struct replica *l);

#endif
