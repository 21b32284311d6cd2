//! `Locks`, the async handle for one Redis server or a Redis Cluster, and `LockGuard`,
//! the ownership of one of its locks: thin faces over the engine ([`crate::exec::engine`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::LockError;
use crate::exec::engine::Engine;
use crate::exec::guard::Guard;
use crate::exec::node::{Node, bounded};
use crate::exec::notify::Notifications;
use crate::machine::lease::Lease;
use crate::machine::limit::DEFAULT_RESPONSE_TIMEOUT;
use crate::machine::settings::{ReplicaWait, Settings};

/// Acquires distributed locks on one Redis server, or on a Redis Cluster
/// ([`connect_cluster`](Locks::connect_cluster)).
///
/// Cheap to clone (clones share the connection, the notification subscription, the
/// local queue and the watchdog); builder methods take and return `Self`, and a setting
/// that cannot work is reported as a typed error by the first call that uses it, never
/// as a panic.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let locks = lockscript::Locks::connect(&client).await?
///     .ttl(Duration::from_secs(30))
///     .wait_timeout(Duration::from_secs(10))
///     .watchdog(true);
/// let guard = locks.lock("orders:42").await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct Locks<C = ConnectionManager> {
    engine: Engine<Node<C>>,
}

impl<C: Clone> Clone for Locks<C> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
        }
    }
}

impl<C> fmt::Debug for Locks<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locks")
            .field("settings", &self.engine.settings)
            .field("notifications", &self.engine.notifications.is_some())
            .finish_non_exhaustive()
    }
}

impl Locks<ConnectionManager> {
    /// Opens a managed connection (it reconnects by itself) and enables release
    /// notifications over a second, pub/sub connection to the same server.
    ///
    /// The managed connection tries a lost server again after 50 ms, then after each
    /// failed call, rather than backing off for seconds: lock calls are bounded by the
    /// response timeout and retried by the lock itself, so they pick up a returning
    /// server within one retry.
    ///
    /// It also loads the release script (`SCRIPT LOAD`), which tells a server that cannot
    /// run Lua at all (a Valkey 9 without its `lua` module): that is
    /// [`LockError::Unsupported`] here rather than at the first lock.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let locks = lockscript::Locks::connect(&client).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(client: &redis::Client) -> Result<Self, LockError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            // The lock bounds each call with its own response timeout.
            .set_response_timeout(None);
        let mut conn = bounded(Duration::from_secs(3), async {
            Ok(client.get_connection_manager_with_config(config).await?)
        })
        .await?;
        check_lua(&mut conn).await?;
        warn_if_evicting(&mut conn).await;
        Ok(Self::new(conn).notifications(client.clone()))
    }
}

/// Fails with [`LockError::Unsupported`] when the server cannot run Lua scripts (see
/// `functions::lua_probe`), bounded by the default response timeout.
pub(crate) async fn check_lua<C: redis::aio::ConnectionLike>(
    conn: &mut C,
) -> Result<(), LockError> {
    let probe = crate::script::functions::lua_probe();
    match tokio::time::timeout(DEFAULT_RESPONSE_TIMEOUT, conn.req_packed_command(&probe)).await {
        Ok(reply) => crate::script::functions::lua_probed(reply),
        Err(_) => Ok(()),
    }
}

/// Logs a warning when the server may evict keys: under memory pressure it would
/// silently delete lock keys (freeing locks that are still held) or fencing counters
/// (restarting tokens from 1). Only `noeviction` is safe for locks. A user without
/// `CONFIG GET` permission simply gets no check.
pub(crate) async fn warn_if_evicting<C: redis::aio::ConnectionLike>(conn: &mut C) {
    let reply = tokio::time::timeout(
        DEFAULT_RESPONSE_TIMEOUT,
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async::<Vec<String>>(conn),
    )
    .await;
    if let Ok(Ok(pair)) = reply
        && let Some(policy) = pair.get(1)
        && policy != "noeviction"
    {
        tracing::warn!(
            policy = %policy,
            "maxmemory-policy is {policy}: under memory pressure Redis may evict lock keys \
             (freeing held locks) and fencing counters (restarting tokens); set \
             maxmemory-policy noeviction on servers that hold locks"
        );
    }
}

#[cfg(feature = "cluster")]
impl Locks<redis::cluster_async::ClusterConnection> {
    /// Opens an async Redis Cluster connection to the cluster of `nodes` (it routes each
    /// lock to the master that owns the lock's slot, follows `MOVED`, and recovers after
    /// a failover), and enables release notifications over a pub/sub connection to one
    /// of `nodes`.
    ///
    /// The cluster connection is made with redis-rs's retries off: it would re-send a
    /// script after an I/O error, when the script may already have run (a re-sent
    /// acquire or handover would answer as if someone else held the lock). The lock
    /// retries only what provably did not run (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`...)
    /// within the response timeout, and `lock()` and the watchdog retry within their own
    /// bounds. Credentials and TLS go in the URLs (`rediss://user:password@host:port`).
    ///
    /// Any node works for notifications, replicas too: on Redis Cluster (7.0 and later)
    /// `PUBLISH` reaches every node. The first node tried is picked at random (so many
    /// processes spread over the cluster); when it is unreachable, or its connection
    /// drops, the next one is used. Until a node answers, waiters poll with the retry
    /// policy.
    ///
    /// [`LockError::InvalidSettings`] if `nodes` is empty; [`LockError::Redis`] if a
    /// node address does not parse or the cluster cannot be reached.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockscript::LockError> {
    /// let nodes = ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/", "redis://10.0.0.3:7000/"];
    /// let locks = lockscript::Locks::connect_cluster(nodes).await?;
    /// let guard = locks.lock("orders:42").await?; // on the master that owns `{orders:42}`
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster<T: redis::IntoConnectionInfo + Clone>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Self, LockError> {
        let nodes: Vec<T> = nodes.into_iter().collect();
        if nodes.is_empty() {
            return Err(LockError::InvalidSettings(
                "connect_cluster needs at least one node address".to_owned(),
            ));
        }
        let subscribers = nodes
            .iter()
            .cloned()
            .map(redis::Client::open)
            .collect::<Result<Vec<_>, _>>()?;
        let client = redis::cluster::ClusterClient::builder(nodes)
            .retries(0)
            .connection_timeout(Duration::from_secs(1))
            .build()?;
        let mut conn = bounded(Duration::from_secs(5), async {
            Ok(client.get_async_connection().await?)
        })
        .await?;
        check_lua(&mut conn).await?;
        let mut locks = Self::new(conn);
        locks.engine.notifications = Some(Arc::new(Notifications::any_of(subscribers)));
        Ok(locks)
    }
}

impl<C> Locks<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Uses an existing async connection (multiplexed, managed, cluster...). Without
    /// [`notifications`](Self::notifications), waiters poll with the retry policy.
    ///
    /// A cluster connection must be built with `ClusterClientBuilder::retries(0)`, as
    /// [`connect_cluster`](Locks::connect_cluster) does: otherwise redis-rs re-sends a
    /// script after an I/O error, when it may already have run.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let conn = client.get_multiplexed_async_connection().await?;
    /// let locks = lockscript::Locks::new(conn).notifications(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(conn: C) -> Self {
        Self {
            engine: Engine::new(Node::new(conn), Settings::default()),
        }
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.engine.settings)
    }

    pub(crate) fn engine(&self) -> &Engine<Node<C>> {
        &self.engine
    }

    /// The lease each grant asks for. Default 30 s; accepted 10 ms ..= 1 day.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.ttl(std::time::Duration::from_secs(10))
    /// # }
    /// ```
    #[must_use]
    pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
        self.settings_mut().ttl = ttl;
        self
    }

    /// How long `lock()` waits before `LockError::Timeout`. Default 10 s.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.wait_timeout(std::time::Duration::from_secs(2))
    /// # }
    /// ```
    #[must_use]
    pub fn wait_timeout(mut self, wait: std::time::Duration) -> Self {
        self.settings_mut().wait_timeout = wait;
        self
    }

    /// Renew leases every ttl/3 while guards live. Default on: long work keeps its
    /// lock, and a lease that cannot be renewed signals its loss.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.watchdog(false)
    /// # }
    /// ```
    #[must_use]
    pub fn watchdog(mut self, on: bool) -> Self {
        self.settings_mut().watchdog = on;
        self
    }

    /// Caps how long the watchdog keeps a lock: after `cap`, renewals stop and the
    /// lease runs out (then its loss is signalled). Default: no cap. Must be at
    /// least the ttl and at most [`MAX_HOLD`](crate::MAX_HOLD).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.max_hold(std::time::Duration::from_secs(300))
    /// # }
    /// ```
    #[must_use]
    pub fn max_hold(mut self, cap: std::time::Duration) -> Self {
        self.settings_mut().max_hold = Some(cap);
        self
    }

    /// The key prefix: lock `name` lives at `<prefix>{name}`. Default `lock:`. It
    /// must not contain braces (they would break the shared hash tag).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.prefix("billing:lock:")
    /// # }
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.settings_mut().prefix = std::sync::Arc::from(prefix);
        self
    }

    /// How long one command may wait for the server's reply before the call fails
    /// with a timeout (a [`LockError::Redis`](crate::LockError::Redis) whose
    /// `is_timeout()` is true). Default 500 ms; accepted 1 ms ..= 60 s. It bounds
    /// every call: `try_lock`, `extend`, `is_held` and `release` return within it,
    /// and `lock()` within `wait_timeout` plus it.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.response_timeout(std::time::Duration::from_millis(200))
    /// # }
    /// ```
    #[must_use]
    pub fn response_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.settings_mut().response_timeout = timeout;
        self
    }

    /// How long a lock's fencing counter (`<prefix>{name}:fence`) outlives the
    /// lease of its last grant. Default 1 hour; accepted 1 ms ..= 365 days.
    ///
    /// An idle counter then expires, so locking per entity (`orders:42`,
    /// `orders:43`, ...) does not fill the server with counters. The next grant
    /// restarts the counter from the server's clock in microseconds (`TIME`), so
    /// fencing tokens still rise across the expiry, provided the server's clock did
    /// not step back by more than the time the counter was idle. Keep it well
    /// above the largest clock step your servers may take.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.fence_retention(std::time::Duration::from_secs(24 * 60 * 60))
    /// # }
    /// ```
    #[must_use]
    pub fn fence_retention(mut self, retention: std::time::Duration) -> Self {
        self.settings_mut().fence_retention = retention;
        self
    }

    /// How waiters pace their attempts; see [`RetryPolicy`](crate::RetryPolicy).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.retry(lockscript::RetryPolicy::new(Duration::from_millis(2), Duration::from_millis(50)))
    /// # }
    /// ```
    #[must_use]
    pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
        self.settings_mut().retry = policy;
        self
    }

    /// How the lock scripts reach the server: [`Delivery::Scripts`](crate::Delivery)
    /// (EVALSHA, the default) or [`Delivery::Functions`](crate::Delivery) (FCALL of
    /// the binary's function library, loaded on the first call that misses it).
    /// Functions survive a failover and a restart with the data, so a promoted
    /// replica serves the first lock call without loading anything; they need Redis
    /// 7.0+ or Valkey 7.2+ (else [`LockError::Unsupported`](crate::LockError)).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.delivery(lockscript::Delivery::Functions)
    /// # }
    /// ```
    #[must_use]
    pub fn delivery(mut self, delivery: crate::Delivery) -> Self {
        self.settings_mut().delivery = delivery;
        self
    }

    /// Fair mode: waiters of every process stand in one queue per lock, kept on the
    /// server, and are served first come, first served. A release hands the lock
    /// straight to the first live waiter (its token, a fresh lease, the next fencing
    /// token) and wakes that waiter alone, on its handle's own channel: no waiter
    /// makes a second attempt, and none is overtaken. Default off (a release then
    /// wakes waiters, and the first to ask wins).
    ///
    /// Every handle that locks a name should use the same mode: a handle without it
    /// ignores the queue. A waiter that stops (cancelled, timed out) leaves the queue
    /// at once; one whose process died is skipped within the bound the guide
    /// states. One server or one Redis Cluster only: a Redlock handle refuses it with
    /// [`LockError::InvalidSettings`](crate::LockError::InvalidSettings).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.fair(true)
    /// # }
    /// ```
    #[must_use]
    pub fn fair(mut self, on: bool) -> Self {
        self.settings_mut().fair = on;
        self
    }

    /// Whether a plain lock's renewals and releases use the server's own conditional
    /// commands where it offers them: `SET … IFEQ … PX` to renew, `DELIFEQ` or `DELEX …
    /// IFEQ` (with the release notification in the same round trip) to release, at a
    /// fraction of a script's server time. Same meaning as the scripts: never a change
    /// to another owner's key, "not held" when not ours, an error means not done.
    /// The handle asks the server what it offers (`COMMAND INFO`, `COMMAND DOCS`) on
    /// first use and after a reconnect or a failover; see
    /// [`offered_commands`](Self::offered_commands). Default on; off: always the
    /// scripts (for an audit that wants every lock command to be a script).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.native_commands(false)
    /// # }
    /// ```
    #[must_use]
    pub fn native_commands(mut self, on: bool) -> Self {
        self.settings_mut().native = on;
        self
    }

    /// What the server was found to offer for [`native_commands`](Self::native_commands):
    /// `None` until a renewal or release asked it (and again after a reconnect).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) {
    /// if let Some(found) = locks.offered_commands() {
    ///     println!("native releases: {}", found.releases());
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn offered_commands(&self) -> Option<crate::NativeCommands> {
        self.engine.backend.offered.get()
    }

    /// After each grant, waits until at least `replicas` replicas of the master that
    /// granted it have acknowledged it (Redis `WAIT replicas timeout`), for at most
    /// `timeout`, like Redisson's lock. With fewer acknowledgements the grant is released
    /// again (in the background) and `try_lock`/`lock` return
    /// [`LockError::NotReplicated`] at once (no retry: it is a replication problem, not
    /// contention). Default: off. `blocking::Locks` has it too.
    ///
    /// This narrows, but does not close, the window in which a failover loses a grant:
    /// replication stays asynchronous, `WAIT` only reports how far it got, and a replica
    /// that acknowledged is not necessarily the one promoted.
    ///
    /// `WAIT` goes on the connection that acquired, in one pipeline behind a renewal of
    /// the lease (a write that follows the grant in the replication stream), so it counts
    /// exactly the replicas that have the grant, even after a reconnect; on a cluster
    /// connection the pipeline is routed to the master owning the lock's slot. `WAIT`
    /// blocks that connection while it waits, so commands of other tasks sharing it queue
    /// behind it for up to `timeout` when replicas lag; and the lease runs meanwhile (it
    /// was counted from before the grant). Keep `timeout` short, well below the ttl. A
    /// grant then takes up to the response timeout plus `timeout`.
    ///
    /// `replicas` must be at least 1 and `timeout` within 1 ms ..= ttl, else
    /// [`LockError::InvalidSettings`] at the first call.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.wait_for_replicas(1, std::time::Duration::from_millis(200))
    /// # }
    /// ```
    #[must_use]
    pub fn wait_for_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.settings_mut().wait_for_replicas = Some(ReplicaWait { replicas, timeout });
        self
    }

    /// Wakes waiters at once when a lock is released, through a pub/sub connection
    /// opened from `client` in the background on first contention (and re-opened if it
    /// drops). No waiter ever waits for that connection: until it answers, waiters poll.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let conn = client.get_multiplexed_async_connection().await?;
    /// let locks = lockscript::Locks::new(conn).notifications(client);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn notifications(mut self, client: redis::Client) -> Self {
        self.engine.notifications = Some(Arc::new(Notifications::new(client)));
        self
    }

    /// One attempt: `Ok(Some(guard))` when acquired, `Ok(None)` when another owner
    /// holds the lock. Returns within the response timeout (plus the
    /// `wait_for_replicas` timeout when set).
    ///
    /// ```no_run
    /// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    /// match locks.try_lock("reports:daily").await? {
    ///     Some(guard) => { /* do the work */ guard.release().await?; }
    ///     None => println!("someone else is on it"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, name: &str) -> Result<Option<LockGuard<C>>, LockError> {
        Ok(self
            .engine
            .try_lock(name)
            .await?
            .map(|inner| LockGuard { inner }))
    }

    /// Waits until the lock is acquired, or fails after `wait_timeout` with
    /// [`LockError::Timeout`] (or with the last error, when the server could not be
    /// reached). Returns within `wait_timeout` plus the response timeout, whatever the
    /// server, the notifications or a reconnect do.
    ///
    /// A waiter sleeps until the release notification, the holder's remaining lease, or
    /// its backoff, whichever comes first, or until a guard of this handle hands the lock
    /// over on release (see [`LockGuard::release`]). Tasks of one handle wait for a name
    /// first come first served; only the first talks to Redis. Transient failures
    /// (server unreachable, timeouts, a Cluster failover) are retried within the wait.
    ///
    /// Cancel-safe: dropping the future at any point leaves no watchdog running, and a
    /// grant whose reply never arrived, or that was handed over to it too late, is
    /// released in the background (its TTL bounds it in every case). Every attempt uses
    /// a fresh owner token, so such a background release never touches a later grant.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    /// let guard = locks.lock("orders:42").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self, name: &str) -> Result<LockGuard<C>, LockError> {
        let watchdog = self.engine.settings.watchdog;
        let inner = self.engine.lock(name, watchdog).await?;
        Ok(LockGuard { inner })
    }

    /// Runs `work` while holding the lock, with the watchdog on. If the lease is lost
    /// before `work` finishes, `work` is dropped at its next await point and the call
    /// returns [`LockError::Lost`]. The lock is released when `work` ends; if the lease
    /// had ended before that release, the call returns [`LockError::NotHeld`] (the work
    /// may have overlapped another holder's) instead of the work's value.
    ///
    /// `work` receives a [`Lease`]: the fencing token and the loss signal.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    /// let total = locks
    ///     .with_lock("ledger", |lease| async move {
    ///         // write with lease.fencing_token() so the store can refuse stale writers
    ///         lease.fencing_token() * 2
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<T, F, Fut>(&self, name: &str, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.engine.with_lock(name, work).await
    }
}

/// Ownership of one acquired lock.
///
/// Release it with [`release`](Self::release). Dropping it without releasing stops
/// its watchdog at once and releases the lock in the background (on the runtime the
/// handle first ran on, even if dropped outside one); in every case the lease's TTL
/// frees the lock. Ownership belongs to the guard, not to a thread or task: it may move
/// between tasks freely.
///
/// Its `Debug` never shows the owner token.
///
/// ```no_run
/// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
/// let guard = locks.lock("orders:42").await?;
/// tokio::select! {
///     () = guard.lost() => eprintln!("lease lost: stop writing"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct LockGuard<C = ConnectionManager>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) inner: Guard<Node<C>>,
}

impl<C> LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A cloneable view of this lease (name, fencing token, loss signal), e.g. to hand
    /// to another task. The guard derefs to the same [`Lease`](crate::Lease).
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::LockGuard) { let lease = guard.lease(); }
    /// ```
    pub fn lease(&self) -> crate::Lease {
        self.inner.held.clone()
    }

    /// Asks the server whether the lock still holds this guard's token. A `false`
    /// also fires the loss signal; after the loss signal it is always `false`. Returns
    /// within the response timeout.
    ///
    /// ```no_run
    /// # async fn f(guard: lockscript::LockGuard) -> Result<(), lockscript::LockError> {
    /// if !guard.is_held().await? { eprintln!("lost"); }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_held(&self) -> Result<bool, LockError> {
        self.inner.is_held().await
    }

    /// Sets the lease to `ttl` from now, if the lock is still ours; the watchdog then
    /// renews with this length. [`LockError::NotHeld`] (and nothing changed) if it is
    /// not, or if the lease was already lost.
    ///
    /// ```no_run
    /// # async fn f(guard: lockscript::LockGuard) -> Result<(), lockscript::LockError> {
    /// guard.extend(std::time::Duration::from_secs(60)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, ttl: std::time::Duration) -> Result<(), LockError> {
        self.inner.extend(ttl).await
    }

    /// Stops the watchdog, then deletes the lock if it still holds this guard's token
    /// and wakes a waiter. [`LockError::NotHeld`] if the lease had been lost (expired,
    /// taken, or the loss signal had fired): the work it protected may have overlapped
    /// another holder's. One round trip, bounded by the response timeout; on an error the
    /// release is retried in the background.
    ///
    /// When a task of the same [`Locks`] handle (or a clone) is waiting for this lock,
    /// the release hands it over instead (`handover.lua`): in the same round trip the
    /// key takes that waiter's token, a full lease and the next fencing token, and the
    /// waiter's `lock()` returns without another attempt. After 8 handovers in a row a
    /// release deletes and publishes as usual, so waiters in other processes get a turn.
    ///
    /// ```no_run
    /// # async fn f(guard: lockscript::LockGuard) -> Result<(), lockscript::LockError> {
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        self.inner.release().await
    }
}

/// A guard is its lease: `guard.fencing_token()`, `guard.lost()`, `guard.is_lost()` and
/// the other methods of [`Lease`](crate::Lease).
impl<C> std::ops::Deref for LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Target = crate::Lease;

    fn deref(&self) -> &crate::Lease {
        &self.inner.held
    }
}

impl<C> fmt::Debug for LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.held.lease.debug(f, "LockGuard")
    }
}
