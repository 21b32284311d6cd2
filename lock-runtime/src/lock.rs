//! `Locks`, the handle that acquires locks, and `LockGuard`, the ownership of one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::time::Instant;
use tracing::Instrument;

use crate::notify::{Notifications, Subscription};
use crate::queue::{HANDOVER_STREAK, Handed, LocalQueue, Offer};
use crate::settings::{Keys, ReplicaWait, Settings, check_ttl, millis, validity};
use crate::token::Token;
use crate::watchdog::{Lease, LeaseState, Watchdog};
use crate::{LockError, builtin};

/// Acquires distributed locks on one Redis server, or on a Redis Cluster
/// ([`connect_cluster`](Locks::connect_cluster)).
///
/// Cheap to clone (clones share the connection and the notification subscription);
/// builder methods take and return `Self`, and a setting that cannot work is reported
/// as a typed error by the first call that uses it, never as a panic.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), lock_runtime::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let locks = lock_runtime::Locks::connect(&client).await?
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
    conn: C,
    settings: Arc<Settings>,
    notifications: Option<Arc<Notifications>>,
    queue: Arc<LocalQueue>,
    leases: Arc<Watchdog<C>>,
}

impl<C: Clone> Clone for Locks<C> {
    fn clone(&self) -> Self {
        Self {
            conn: self.conn.clone(),
            settings: Arc::clone(&self.settings),
            notifications: self.notifications.clone(),
            queue: Arc::clone(&self.queue),
            leases: Arc::clone(&self.leases),
        }
    }
}

impl<C> fmt::Debug for Locks<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locks")
            .field("settings", &self.settings)
            .field("notifications", &self.notifications.is_some())
            .finish_non_exhaustive()
    }
}

impl Locks<ConnectionManager> {
    /// Opens a managed connection (it reconnects by itself) and enables release
    /// notifications over a second, pub/sub connection to the same server.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let locks = lock_runtime::Locks::connect(&client).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(client: &redis::Client) -> Result<Self, LockError> {
        let mut conn = client.get_connection_manager().await?;
        warn_if_evicting(&mut conn).await;
        Ok(Self::new(conn).notifications(client.clone()))
    }
}

/// Logs a warning when the server may evict keys: under memory pressure it would
/// silently delete lock keys (freeing locks that are still held) or fencing counters
/// (restarting tokens from 1). Only `noeviction` is safe for locks. A user without
/// `CONFIG GET` permission simply gets no check.
pub(crate) async fn warn_if_evicting<C: redis::aio::ConnectionLike>(conn: &mut C) {
    let reply: Result<Vec<String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    if let Ok(pair) = reply
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

impl Locks<redis::cluster_async::ClusterConnection> {
    /// Opens an async Redis Cluster connection from `client` (it routes each lock to the
    /// master that owns the lock's slot, follows `MOVED`, and recovers after a failover),
    /// and enables release notifications over a pub/sub connection to one of `nodes`.
    ///
    /// `nodes` are the addresses to subscribe on, usually the very list the client was
    /// built from: `ClusterClient` does not expose its nodes, and this also lets you pass
    /// the credentials the pub/sub connection needs. Any node works, replicas too: on
    /// Redis Cluster (7.0 and later) `PUBLISH` reaches every node. The first node tried is
    /// picked at random (so many processes spread over the cluster); when it is
    /// unreachable, or its connection drops and it does not come back, the next one is
    /// used. Until a node answers, waiters poll with the retry policy. A node that is up
    /// but cut off from the cluster bus stops hearing releases without dropping the
    /// connection; waiters then also fall back to polling.
    ///
    /// [`LockError::InvalidSettings`] if `nodes` is empty; [`LockError::Redis`] if a
    /// node address does not parse or the cluster cannot be reached.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let nodes = ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/", "redis://10.0.0.3:7000/"];
    /// let client = redis::cluster::ClusterClient::new(nodes)?;
    /// let locks = lock_runtime::Locks::connect_cluster(&client, nodes).await?;
    /// let guard = locks.lock("orders:42").await?; // on the master that owns `{orders:42}`
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster<T: redis::IntoConnectionInfo>(
        client: &redis::cluster::ClusterClient,
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Self, LockError> {
        let subscribers = nodes
            .into_iter()
            .map(redis::Client::open)
            .collect::<Result<Vec<_>, _>>()?;
        if subscribers.is_empty() {
            return Err(LockError::InvalidSettings(
                "connect_cluster needs at least one node address to subscribe to release \
                 notifications on; pass the node list the ClusterClient was built from"
                    .to_owned(),
            ));
        }
        let conn = client.get_async_connection().await?;
        let mut locks = Self::new(conn);
        locks.notifications = Some(Arc::new(Notifications::any_of(subscribers)));
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
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let conn = client.get_multiplexed_async_connection().await?;
    /// let locks = lock_runtime::Locks::new(conn).notifications(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(conn: C) -> Self {
        Self {
            leases: Arc::new(Watchdog::new(conn.clone())),
            conn,
            settings: Arc::new(Settings::default()),
            notifications: None,
            queue: Arc::default(),
        }
    }

    crate::settings::settings_builder!("lock_runtime::Locks");

    /// After each grant, waits until at least `replicas` replicas of the master that
    /// granted it have acknowledged it (Redis `WAIT replicas timeout`), for at most
    /// `timeout`, like Redisson's lock. With fewer acknowledgements the grant is released again
    /// and `try_lock`/`lock` return [`LockError::NotReplicated`] at once (no retry: it is
    /// a replication problem, not contention). Default: off. Only on this async handle.
    ///
    /// This narrows, but does not close, the window in which a failover loses a grant:
    /// replication stays asynchronous, `WAIT` only reports how far it got, and a replica
    /// that acknowledged is not necessarily the one promoted.
    ///
    /// `WAIT` goes on the connection that acquired, in one round trip with a `GETEX` of
    /// the lock's key that checks the grant is still there: on a cluster connection
    /// that pipeline is routed to the master owning the lock's slot (a bare `WAIT` would go
    /// to every master and count the minimum). `WAIT` blocks that connection while it
    /// waits, so commands of other tasks sharing it queue behind it for up to `timeout`
    /// when replicas lag; and the lease runs meanwhile (it was counted from before the
    /// grant). Keep `timeout` short, well below the ttl.
    ///
    /// `replicas` must be at least 1 and `timeout` within 1 ms ..= ttl, else
    /// [`LockError::InvalidSettings`] at the first call.
    ///
    /// ```no_run
    /// # fn f(locks: lock_runtime::Locks) -> lock_runtime::Locks {
    /// locks.wait_for_replicas(1, std::time::Duration::from_millis(200))
    /// # }
    /// ```
    #[must_use]
    pub fn wait_for_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.settings).wait_for_replicas =
            Some(ReplicaWait { replicas, timeout });
        self
    }

    /// Wakes waiters at once when a lock is released, through a pub/sub connection
    /// opened from `client` on first contention (and re-opened if it drops).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let conn = client.get_multiplexed_async_connection().await?;
    /// let locks = lock_runtime::Locks::new(conn).notifications(client);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn notifications(mut self, client: redis::Client) -> Self {
        self.notifications = Some(Arc::new(Notifications::new(client)));
        self
    }

    /// One attempt: `Ok(Some(guard))` when acquired, `Ok(None)` when another owner
    /// holds the lock.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::Locks) -> Result<(), lock_runtime::LockError> {
    /// match locks.try_lock("reports:daily").await? {
    ///     Some(guard) => { /* do the work */ guard.release().await?; }
    ///     None => println!("someone else is on it"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, name: &str) -> Result<Option<LockGuard<C>>, LockError> {
        self.settings.validate()?;
        let keys = self.settings.keys(name)?;
        let token = Token::new()?;
        let started = Instant::now();
        match self.attempt(&keys, &token).await? {
            Attempt::Acquired { fence, sent } => {
                let grant = Grant {
                    fence,
                    sent,
                    attempts: 1,
                    handovers: 0,
                };
                let guard = self.guard(keys, token, grant, started, self.settings.watchdog);
                self.replicated(guard).await.map(Some)
            }
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// Waits until the lock is acquired, or fails with [`LockError::Timeout`] after
    /// `wait_timeout`. A waiter sleeps until the release notification, the holder's
    /// remaining lease, or its backoff, whichever comes first, or until a guard of this
    /// handle hands the lock over on release (see [`LockGuard::release`]). Tasks of one
    /// handle wait for a name first come first served; only the first talks to Redis.
    ///
    /// Cancel-safe: dropping the future at any point leaves no watchdog running, and a
    /// grant whose reply never arrived, or that was handed over to it too late, is
    /// released in the background (its TTL bounds it in every case).
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::Locks) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("orders:42").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self, name: &str) -> Result<LockGuard<C>, LockError> {
        self.lock_with(name, self.settings.watchdog).await
    }

    async fn lock_with(&self, name: &str, watchdog: bool) -> Result<LockGuard<C>, LockError> {
        self.settings.validate_wait()?;
        let keys = self.settings.keys(name)?;
        let token = Token::new()?;
        let span = tracing::debug_span!("lock.acquire", lock = %keys.name);
        async {
            let started = Instant::now();
            let deadline = started + self.settings.wait_timeout;
            let Ok(mut turn) = tokio::time::timeout_at(deadline, self.queue.turn(&keys.name)).await
            else {
                return Err(LockError::Timeout {
                    name: keys.name.clone(),
                    waited: started.elapsed(),
                    attempts: 0,
                });
            };
            // Joining a channel that is still subscribed (the previous head of the queue
            // just left it) costs nothing, and then no extra attempt is needed to cover
            // the gap before subscribing.
            let mut subscription: Option<Subscription> = self
                .notifications
                .as_ref()
                .and_then(|n| n.started())
                .and_then(|n| n.join(&keys.channel));
            // The previous head of the queue just got the lock: an attempt now would be
            // refused. Wait for its release (or the backoff) first.
            let mut skip_attempt = subscription.is_some() && turn.follows_a_grant();
            let mut attempts = 0u32;
            let mut waits = 0u32;
            let mut remaining = None;
            let grant = loop {
                if !skip_attempt {
                    attempts += 1;
                    match self.attempt(&keys, &token).await? {
                        Attempt::Acquired { fence, sent } => {
                            break Grant {
                                fence,
                                sent,
                                attempts,
                                handovers: 0,
                            };
                        }
                        Attempt::Held { remaining: left } => remaining = left,
                    }
                    if subscription.is_none()
                        && let Some(notifications) = &self.notifications
                        && let Some(notifier) = notifications.get().await
                    {
                        // Subscribe, then try once more at once: a release between the
                        // first attempt and the subscription would otherwise be missed.
                        subscription = Some(notifier.subscribe(&keys.channel).await);
                        continue;
                    }
                }
                skip_attempt = false;
                let now = Instant::now();
                if now >= deadline {
                    tracing::debug!(attempts, "lock wait timed out");
                    return Err(LockError::Timeout {
                        name: keys.name.clone(),
                        waited: now - started,
                        attempts,
                    });
                }
                let nap = self.settings.retry.nap(waits, remaining, deadline - now);
                waits += 1;
                tracing::trace!(?nap, attempts, "lock held; waiting");
                if let Some(handed) = self.wait(&keys, &token, subscription.as_ref(), nap).await {
                    break Grant {
                        fence: handed.fence,
                        sent: handed.sent,
                        attempts,
                        handovers: handed.streak,
                    };
                }
            };
            turn.granted();
            let guard = self.guard(keys, token, grant, started, watchdog);
            self.replicated(guard).await
        }
        .instrument(span)
        .await
    }

    /// Sleeps until the release notification, `nap`, or a handover from a guard of this
    /// handle releasing the lock, whichever comes first; the handover if there was one.
    /// A handover that arrives after its validity is released and does not count.
    async fn wait(
        &self,
        keys: &Keys,
        token: &Token,
        subscription: Option<&Subscription>,
        nap: Duration,
    ) -> Option<Handed> {
        let mut offer = self
            .queue
            .offer(&keys.name, &keys.lock, token, self.settings.ttl);
        let released = async {
            match subscription {
                Some(sub) => sub.released().await,
                None => std::future::pending().await,
            }
        };
        let handed = tokio::select! {
            () = released => None,
            () = tokio::time::sleep(nap) => None,
            handed = offer.handed() => Some(handed),
        };
        let handed = match handed {
            Some(handed) => handed,
            None => offer.settle().await,
        }?;
        if Instant::now() >= handed.sent + validity(self.settings.ttl) {
            // Dropped unclaimed, it is released in the background.
            tracing::debug!(lock = %keys.name, "handover arrived after its validity; released");
            return None;
        }
        tracing::debug!(lock = %keys.name, fence = handed.fence, "lock handed over");
        Some(handed.claim())
    }

    /// Runs `work` while holding the lock, with the watchdog on. If the lease is lost
    /// before `work` finishes, `work` is dropped at its next await point and the call
    /// returns [`LockError::Lost`]. The lock is released when `work` ends.
    ///
    /// `work` receives a [`Lease`]: the fencing token and the loss signal.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::Locks) -> Result<(), lock_runtime::LockError> {
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
        let guard = self.lock_with(name, true).await?;
        let lease = guard.lease();
        crate::watchdog::guarded(guard.lease(), work(lease), move || guard.release()).await
    }

    async fn attempt(&self, keys: &Keys, token: &Token) -> Result<Attempt, LockError> {
        let mut conn = self.conn.clone();
        let sent = Instant::now();
        // If this future is dropped while the command is in flight, the grant may have
        // happened with nobody to own it: the pending marker releases it.
        let mut pending = PendingGrant {
            conn: Some(self.conn.clone()),
            lock: &keys.lock,
            token,
            ttl: self.settings.ttl,
        };
        let reply = builtin::acquire(
            &keys.lock,
            &keys.fence,
            token.as_str(),
            millis(self.settings.ttl),
        )
        .invoke_async(&mut conn)
        .await;
        // The marker stays armed, so the grant is released in the background, when the
        // reply was lost (an I/O error or a timeout: the grant may have happened all the
        // same) or came after the lease it granted had ended on our clock.
        let attempt = Attempt::from_reply(keys, pending.disarm_if_not_run(reply)?, sent);
        if matches!(attempt, Attempt::Acquired { .. })
            && Instant::now() >= sent + validity(self.settings.ttl)
        {
            tracing::debug!(lock = %keys.name, "grant arrived after its validity; released");
            return Ok(Attempt::Held { remaining: None });
        }
        pending.conn = None;
        Ok(attempt)
    }

    /// With `wait_for_replicas` on: `WAIT` for the replicas, and the guard back if
    /// enough acknowledged; else the grant is released and `NotReplicated` returned.
    /// Dropping this future drops the guard, which releases the grant in the background.
    async fn replicated(&self, guard: LockGuard<C>) -> Result<LockGuard<C>, LockError> {
        let Some(ReplicaWait { replicas, timeout }) = self.settings.wait_for_replicas else {
            return Ok(guard);
        };
        let mut conn = self.conn.clone();
        // WAIT counts the replicas that acknowledged this connection's latest write, so it
        // must go on the connection that acquired. The keyed GETEX (GET, but flagged as a
        // write, so never routed to a replica) makes a cluster connection send the
        // pipeline to the master owning the lock's slot; a bare WAIT would go to every
        // master and report the minimum. GETEX without options changes nothing. Its reply
        // tells whether the grant is still there: after a reconnect (a new connection has
        // no writes) WAIT's count would say nothing about it.
        let reply: Result<(usize, Option<String>), _> = redis::pipe()
            .cmd("WAIT")
            .arg(replicas)
            .arg(millis(timeout))
            .cmd("GETEX")
            .arg(&guard.state.keys.lock)
            .query_async(&mut conn)
            .await;
        // On an error the guard is dropped here, which releases it in the background.
        let (acked, holder) = reply?;
        let ours = holder.as_deref() == Some(guard.token.as_str());
        if ours && acked >= replicas {
            tracing::debug!(lock = %guard.name(), acked, "grant acknowledged by replicas");
            return Ok(guard);
        }
        let acked = if ours { acked } else { 0 };
        let name = guard.name().to_owned();
        tracing::warn!(lock = %name, acked, wanted = replicas, "grant not replicated; releasing it");
        if let Err(e) = guard.release().await {
            tracing::debug!(lock = %name, error = %e, "release of an unreplicated grant failed; the ttl frees it");
        }
        Err(LockError::NotReplicated {
            name,
            acked,
            wanted: replicas,
        })
    }

    fn guard(
        &self,
        keys: Keys,
        token: Token,
        grant: Grant,
        started: Instant,
        watchdog: bool,
    ) -> LockGuard<C> {
        let state = Arc::new(LeaseState::new(
            keys,
            grant.fence,
            token.as_str(),
            &self.settings,
            grant.sent,
            watchdog,
        ));
        self.leases.watch(&state);
        LockGuard {
            state,
            token,
            conn: self.conn.clone(),
            leases: Arc::clone(&self.leases),
            queue: Arc::clone(&self.queue),
            released: false,
            waited: grant.sent.saturating_duration_since(started),
            attempts: grant.attempts,
            handovers: grant.handovers,
        }
    }
}

/// How a guard's grant came about.
#[derive(Clone, Copy)]
struct Grant {
    fence: u64,
    /// When the granting command (acquire or handover) was sent.
    sent: Instant,
    /// This caller's acquire attempts.
    attempts: u32,
    /// Handovers in a row that led to this grant (0: acquired by an attempt).
    handovers: u32,
}

/// The outcome of one run of acquire-with-retry.lua.
pub(crate) enum Attempt<I = Instant> {
    /// Granted with this fencing token; `sent` is when the command left.
    Acquired { fence: u64, sent: I },
    /// Held by another owner for `remaining` more (unknown if the key has no expiry).
    Held { remaining: Option<Duration> },
}

impl<I> Attempt<I> {
    pub(crate) fn from_reply(keys: &Keys, (acquired, value): (i64, i64), sent: I) -> Self {
        if acquired == 1 {
            let fence = u64::try_from(value).unwrap_or_default();
            tracing::debug!(lock = %keys.name, fence, "lock acquired");
            Attempt::Acquired { fence, sent }
        } else {
            Attempt::Held {
                remaining: u64::try_from(value).ok().map(Duration::from_millis),
            }
        }
    }
}

/// Releases a grant whose reply was never read: the acquiring future was dropped, or
/// the reply was lost to an I/O error or a timeout.
struct PendingGrant<'a, C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    conn: Option<C>,
    lock: &'a str,
    token: &'a Token,
    ttl: Duration,
}

impl<C> PendingGrant<'_, C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The reply of the granting command. An I/O error or a timeout (`LockError::Redis`)
    /// leaves the marker armed: the script may have run all the same. Any other error
    /// means it did not, so there is nothing to release. A success leaves the decision
    /// to the caller.
    fn disarm_if_not_run<T>(&mut self, reply: Result<T, LockError>) -> Result<T, LockError> {
        if let Err(e) = &reply
            && !matches!(e, LockError::Redis(_))
        {
            self.conn = None;
        }
        reply
    }
}

impl<C> Drop for PendingGrant<'_, C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            release_in_background(
                conn,
                self.lock.to_owned(),
                self.token.clone(),
                self.ttl,
                None,
            );
        }
    }
}

/// compare-del in a task, after a renewal in flight (if any) has finished. Without a
/// runtime there is nothing to run it on; the lease's TTL frees the lock then.
fn release_in_background<C>(
    mut conn: C,
    lock: String,
    token: Token,
    ttl: Duration,
    renewal: Option<Arc<LeaseState>>,
) where
    C: redis::aio::ConnectionLike + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        if let Some(lease) = renewal {
            lease.renewal_finished().await;
        }
        // A server that is paused or reconnecting may need a few tries. Bounded: after
        // `ttl` the lease has run out anyway.
        let give_up = Instant::now() + ttl;
        let mut delay = Duration::from_millis(50);
        loop {
            match builtin::compare_del(&lock, token.as_str())
                .invoke_async(&mut conn)
                .await
            {
                Ok(released) => {
                    tracing::debug!(lock, released, "released in the background");
                    return;
                }
                Err(LockError::Redis(e)) if Instant::now() + delay < give_up => {
                    tracing::debug!(lock, error = %e, retry_in = ?delay, "background release failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    tracing::debug!(lock, error = %e, "background release failed; the ttl frees it");
                    return;
                }
            }
        }
    });
}

/// Ownership of one acquired lock.
///
/// Release it with [`release`](Self::release). Dropping it without releasing stops
/// its watchdog at once and releases the lock in the background when a tokio runtime
/// is available; in every case the lease's TTL frees the lock. Ownership belongs to
/// the guard, not to a thread or task: it may move between tasks freely.
///
/// Its `Debug` never shows the owner token.
///
/// ```no_run
/// # async fn demo(locks: lock_runtime::Locks) -> Result<(), lock_runtime::LockError> {
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
    state: Arc<LeaseState>,
    token: Token,
    conn: C,
    leases: Arc<Watchdog<C>>,
    queue: Arc<LocalQueue>,
    released: bool,
    waited: Duration,
    attempts: u32,
    handovers: u32,
}

impl<C> LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    crate::watchdog::lease_accessors!("lock_runtime::LockGuard");

    /// Asks the server whether the lock still holds this guard's token. A `false` also
    /// fires the loss signal; after the loss signal it is always `false`.
    ///
    /// ```no_run
    /// # async fn f(guard: lock_runtime::LockGuard) -> Result<(), lock_runtime::LockError> {
    /// if !guard.is_held().await? { eprintln!("lost"); }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_held(&self) -> Result<bool, LockError> {
        let mut conn = self.conn.clone();
        let value: Option<String> = redis::cmd("GET")
            .arg(&self.state.keys.lock)
            .query_async(&mut conn)
            .await?;
        let ours = value.as_deref() == Some(self.token.as_str());
        if !ours {
            self.state.mark_lost("the key changed owner or vanished");
        }
        Ok(ours && !self.state.is_lost())
    }

    /// Sets the lease to `ttl` from now, if the lock is still ours; the watchdog then
    /// renews with this length. [`LockError::NotHeld`] (and nothing changed) if it is
    /// not, or if the loss signal has already fired.
    ///
    /// ```no_run
    /// # async fn f(guard: lock_runtime::LockGuard) -> Result<(), lock_runtime::LockError> {
    /// guard.extend(std::time::Duration::from_secs(60)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        check_ttl(ttl)?;
        if self.state.is_lost() {
            return Err(self.not_held());
        }
        let mut conn = self.conn.clone();
        let sent = Instant::now();
        let renewed = builtin::renew(&self.state.keys.lock, self.token.as_str(), millis(ttl))
            .invoke_async(&mut conn)
            .await?;
        if renewed == 1 {
            self.state.renewed(sent, ttl);
            self.leases.schedule(&self.state);
            tracing::debug!(lock = %self.name(), ?ttl, "lease extended");
            Ok(())
        } else {
            self.state.mark_lost("the key changed owner or vanished");
            Err(self.not_held())
        }
    }

    /// Stops the watchdog (waiting for a renewal in flight), then deletes the lock if it
    /// still holds this guard's token and wakes a waiter. [`LockError::NotHeld`] if the
    /// lease had been lost (expired, taken, or the loss signal had fired): the work it
    /// protected may have overlapped another holder's.
    ///
    /// When a task of the same [`Locks`] handle (or a clone) is waiting for this lock,
    /// the release hands it over instead (`handover.lua`): in the same round trip the
    /// key takes that waiter's token, a full lease and the next fencing token, and the
    /// waiter's `lock()` returns without another attempt. After 8 handovers in a row a
    /// release deletes and publishes as usual, so waiters in other processes get a turn.
    ///
    /// ```no_run
    /// # async fn f(guard: lock_runtime::LockGuard) -> Result<(), lock_runtime::LockError> {
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<(), LockError> {
        if self.state.stop() {
            self.state.renewal_finished().await;
        }
        self.leases.forget(&self.state);
        // Once the loss was signalled the guard stays lost, but the key may still be ours
        // (validity ends before the server's expiry): delete it all the same.
        let lost_before = self.state.is_lost();
        if !lost_before
            && self.handovers < HANDOVER_STREAK
            && let Some(offer) = self
                .queue
                .take_offer(&self.state.keys.name, &self.state.keys.lock)
        {
            return self.hand_over(offer).await;
        }
        let mut conn = self.conn.clone();
        let released = builtin::compare_del(&self.state.keys.lock, self.token.as_str())
            .invoke_async(&mut conn)
            .await?;
        // From here on, drop has nothing left to do.
        self.released = true;
        if released == 1 && !lost_before {
            tracing::debug!(lock = %self.name(), fence = self.state.fence, "lock released");
            Ok(())
        } else {
            Err(self.lost_on_release())
        }
    }

    /// Release by handover.lua: the lock passes to the local waiter of `offer` in the
    /// same step. If the waiter has gone by the time it is told, or this future is
    /// dropped with the command in flight, its grant is released in the background.
    async fn hand_over(mut self, offer: Offer) -> Result<(), LockError> {
        let state = Arc::clone(&self.state);
        let next = offer.token.clone();
        let mut conn = self.conn.clone();
        let sent = Instant::now();
        let mut pending = PendingGrant {
            conn: Some(self.conn.clone()),
            lock: &state.keys.lock,
            token: &next,
            ttl: offer.ttl,
        };
        let reply = builtin::handover(
            &state.keys.lock,
            &state.keys.fence,
            self.token.as_str(),
            next.as_str(),
            millis(offer.ttl),
        )
        .invoke_async(&mut conn)
        .await;
        // After an error the handover may have happened: the pending grant is released,
        // and dropping this guard releases ours (whichever of the two holds the key).
        let fence = pending.disarm_if_not_run(reply)?;
        self.released = true;
        let Ok(fence @ 1..) = u64::try_from(fence) else {
            // Not ours any more; nothing changed, and the waiter, told nothing, tries.
            pending.conn = None;
            return Err(self.lost_on_release());
        };
        // From here the grant belongs to the message: it releases it unless claimed.
        pending.conn = None;
        drop(pending);
        let (conn, lock, ttl) = (self.conn.clone(), state.keys.lock.clone(), offer.ttl);
        let release = move || release_in_background(conn, lock, next, ttl, None);
        let streak = self.handovers + 1;
        offer.hand(Handed::new(fence, sent, streak, Box::new(release)));
        tracing::debug!(lock = %self.name(), fence = self.state.fence, "lock released by handover");
        Ok(())
    }

    /// A release found the key gone or owned by another: the loss is signalled, and the
    /// caller gets [`LockError::NotHeld`].
    fn lost_on_release(&self) -> LockError {
        self.state
            .mark_lost("released after the key changed owner or vanished");
        self.not_held()
    }

    fn not_held(&self) -> LockError {
        LockError::NotHeld {
            name: self.state.keys.name.clone(),
        }
    }
}

impl<C> Drop for LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let in_flight = self.state.stop();
        self.leases.forget(&self.state);
        tracing::debug!(lock = %self.name(), "guard dropped without release; releasing in the background");
        release_in_background(
            self.conn.clone(),
            self.state.keys.lock.clone(),
            self.token.clone(),
            self.state.remaining(),
            in_flight.then(|| Arc::clone(&self.state)),
        );
    }
}

impl<C> fmt::Debug for LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.state.keys.name)
            .field("fencing_token", &self.state.fence)
            .field("lost", &self.state.is_lost())
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}
