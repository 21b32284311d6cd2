//! `Locks`, the async handle for one Redis server or a Redis Cluster, and `LockGuard`,
//! the ownership of one of its locks: thin faces over the engine ([`crate::exec::engine`]).

use std::fmt;
use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::LockError;
use crate::exec::backend::Backend;
use crate::exec::engine::Engine;
use crate::exec::guard::Guard;
use crate::exec::node::{Node, bounded};
use crate::faces::handle::Handle;
use crate::machine::key::Kind;
use crate::machine::lease::Lease;
use crate::machine::limit::DEFAULT_RESPONSE_TIMEOUT;
use crate::machine::settings::Settings;

/// Acquires distributed locks on one Redis server, or on a Redis Cluster
/// ([`connect_cluster`](Locks::connect_cluster)). Its builder methods (`ttl`,
/// `wait_timeout`, `watchdog`...) are [`Handle`](crate::Handle)'s, shared with
/// [`Redlock`](crate::Redlock) and [`blocking::Locks`](crate::blocking::Locks).
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
pub type Locks<C = ConnectionManager> = Handle<Engine<Node<C>>>;

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
        .await
        .map_err(|e| match e {
            LockError::Redis(source) => LockError::connect(client, source),
            other => other,
        })?;
        check_lua(&mut conn).await.map_err(|e| match e {
            LockError::Redis(source) => LockError::connect(client, source),
            other => other,
        })?;
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
impl Locks<crate::ClusterConnection> {
    /// Opens a Redis Cluster connection to the cluster of `nodes` (a
    /// [`ClusterConnection`](crate::ClusterConnection): each lock goes to the primary
    /// that owns the lock's slot, `MOVED` is followed, the slots are read again after a
    /// failover), and enables release notifications over a pub/sub connection to one of
    /// `nodes`.
    ///
    /// **A primary's trouble costs only its own leases**: while one primary restarts,
    /// drops its connections or stops answering, calls and renewals on the others go on
    /// (the slots are read again in the background). redis-rs's cluster connection
    /// holds every call while it refreshes its slots, which costs every lease on every
    /// primary when the troubled one accepts connections but does not answer; see the
    /// cluster guide.
    ///
    /// Nothing that may have run is sent again: the lock retries only what provably did
    /// not run (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`...) within the response timeout, and
    /// `lock()` and the watchdog retry within their own bounds. Credentials and TLS go
    /// in the URLs (`rediss://user:password@host:port`).
    ///
    /// Any node works for notifications, replicas too: on Redis Cluster (7.0 and later)
    /// `PUBLISH` reaches every node. The first node tried is picked at random (so many
    /// processes spread over the cluster); when it is unreachable, or its connection
    /// drops, the next one is used. Until a node answers, waiters poll with the retry
    /// policy.
    ///
    /// [`LockError::InvalidSettings`] if `nodes` is empty; [`LockError::Redis`] if a
    /// node address does not parse; [`LockError::Connect`] if no node answered with the
    /// cluster's slots within 5 s.
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
        let infos = subscribers.iter().map(|c| c.get_connection_info().clone());
        let mut conn = crate::ClusterConnection::connect(infos).await?;
        check_lua(&mut conn).await?;
        let mut locks = Self::new(conn);
        let notifications = crate::exec::notify::Notifications::any_of(subscribers);
        locks.engine.notifications = Some(std::sync::Arc::new(notifications));
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
        Handle {
            engine: Engine::new(Node::new(conn), Settings::default()),
        }
    }
}

/// The lock methods of [`Locks`] and [`Redlock`](crate::Redlock), written once over
/// their backends (one server or a Cluster; N masters).
impl<B: Face> Handle<Engine<B>> {
    /// One attempt: `Ok(Some(guard))` when acquired, `Ok(None)` when another owner
    /// holds the lock. Returns within the response timeout (plus the
    /// `wait_for_replicas` timeout when set). For Redlock: when a majority granted in
    /// time (else nothing is left held), within three node timeouts (acquire, raise the
    /// fencing counters, undo).
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
    pub async fn try_lock(&self, name: &str) -> Result<Option<B::Guard>, LockError> {
        let granted = self.engine.try_grant(name, Kind::Lock).await?;
        Ok(granted.map(|inner| B::guard(LeaseGuard { inner })))
    }

    /// Waits until the lock is acquired, or fails after `wait_timeout` with
    /// [`LockError::Timeout`] (or with the last error, when the server could not be
    /// reached). Returns within `wait_timeout` plus the response timeout (for Redlock,
    /// plus one attempt), whatever the server, the notifications or a reconnect do.
    ///
    /// A waiter sleeps until the release notification, the holder's remaining lease, or
    /// its backoff, whichever comes first, or until a guard of this handle hands the lock
    /// over on release (see [`LeaseGuard::release`]). Tasks of one handle wait for a name
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
    pub async fn lock(&self, name: &str) -> Result<B::Guard, LockError> {
        let watchdog = self.engine.settings.watchdog;
        let inner = self.engine.grant(name, Kind::Lock, watchdog).await?;
        Ok(B::guard(LeaseGuard { inner }))
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

/// Ownership of one acquired lock, from [`Locks`] (as [`LockGuard`]) or
/// [`Redlock`](crate::Redlock) (as [`RedlockGuard`](crate::RedlockGuard)).
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
pub struct LeaseGuard<B: Backend> {
    pub(crate) inner: Guard<B>,
}

/// What a handle over backend `B` gives out for a lock: [`LockGuard`] on one server or a
/// Cluster, [`RedlockGuard`](crate::RedlockGuard) on N masters. Each is its own type so
/// that the compiler's messages name what the user wrote.
///
/// Name it to write code once for every topology, over the generic forms
/// ([`ElectionOf`](crate::ElectionOf), [`LeadershipOf`](crate::LeadershipOf),
/// [`ObserverOf`](crate::ObserverOf)); only lockscript's backends implement it.
///
/// ```no_run
/// # #[cfg(feature = "redlock")]
/// # async fn demo(locks: lockscript::Locks, redlock: lockscript::Redlock) -> Result<(), lockscript::LockError> {
/// async fn lead_once<B: lockscript::Face>(
///     election: lockscript::ElectionOf<B>,
/// ) -> Result<u64, lockscript::LockError> {
///     let leadership = election.campaign("10.0.0.7:8080").await?;
///     let term = leadership.term();
///     leadership.resign().await?;
///     Ok(term)
/// }
/// lead_once(locks.election("billing")).await?;
/// lead_once(redlock.election("billing")).await?;
/// # Ok(())
/// # }
/// ```
pub trait Face: Backend {
    /// The guard of one lock.
    type Guard;

    /// The guard of an acquired lock.
    fn guard(lease: LeaseGuard<Self>) -> Self::Guard;
}

impl<C> Face for Node<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Guard = LockGuard<C>;

    fn guard(lease: LeaseGuard<Self>) -> LockGuard<C> {
        LockGuard { inner: lease }
    }
}

/// Ownership of one lock of [`Locks`], on one server or a Cluster: a [`LeaseGuard`]
/// with all of its methods (`lease`, `is_held`, `extend`, and through it the
/// [`Lease`](crate::Lease)'s fencing token and loss signals), and
/// [`release`](Self::release).
///
/// ```no_run
/// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
/// let guard: lockscript::LockGuard = locks.lock("orders:42").await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct LockGuard<C = ConnectionManager>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) inner: LeaseGuard<Node<C>>,
}

impl<C> LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn from_grant(inner: Guard<Node<C>>) -> Self {
        LockGuard {
            inner: LeaseGuard { inner },
        }
    }

    /// The engine's guard, for the kinds that release their own way.
    pub(crate) fn grant(&self) -> &Guard<Node<C>> {
        &self.inner.inner
    }

    pub(crate) fn into_grant(self) -> Guard<Node<C>> {
        self.inner.inner
    }

    /// Stops the watchdog, then deletes the lock if it still holds this guard's token
    /// and wakes a waiter, or hands it to a waiting task of the same handle: as
    /// [`LeaseGuard::release`] says. [`LockError::NotHeld`] if the lease had been lost.
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

/// The methods of [`LeaseGuard`], and through it of the [`Lease`](crate::Lease).
impl<C> std::ops::Deref for LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Target = LeaseGuard<Node<C>>;

    fn deref(&self) -> &LeaseGuard<Node<C>> {
        &self.inner
    }
}

impl<C> fmt::Debug for LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<B: Backend> LeaseGuard<B> {
    /// A cloneable view of this lease (name, fencing token, loss signal), e.g. to hand
    /// to another task. The guard derefs to the same [`Lease`](crate::Lease).
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::LockGuard) { let lease = guard.lease(); }
    /// ```
    pub fn lease(&self) -> crate::Lease {
        self.inner.owned.held.clone()
    }

    /// Asks the server (for Redlock, the masters: a majority must hold it) whether the
    /// lock still holds this guard's token. A `false` also fires the loss signal; after
    /// the loss signal it is always `false`. Returns within the response timeout (for
    /// Redlock, the node timeout).
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

    /// Sets the lease to `ttl` from now, if the lock is still ours (for Redlock, on a
    /// majority within the validity); the watchdog then renews with this length.
    /// [`LockError::NotHeld`] (and nothing changed) if it is not, or if the lease was
    /// already lost.
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
    /// (for Redlock, on every master) and wakes a waiter. [`LockError::NotHeld`] if the
    /// lease had been lost (expired, taken, held by fewer than a majority of Redlock
    /// masters, or the loss signal had fired): the work it protected may have
    /// overlapped another holder's. One round trip, bounded by the response timeout; on
    /// an error the release is retried in the background.
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
impl<B: Backend> std::ops::Deref for LeaseGuard<B> {
    type Target = crate::Lease;

    fn deref(&self) -> &crate::Lease {
        &self.inner.owned.held
    }
}

impl<B: Backend> fmt::Debug for LeaseGuard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.owned.held.lease.debug(f, B::GUARD)
    }
}
