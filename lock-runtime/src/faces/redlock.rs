//! [`Redlock`]: the lock surface over N independent Redis masters, a thin face over the
//! engine with the quorum backend ([`crate::exec::quorum`], where the algorithm is
//! described).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::LockError;
use crate::exec::engine::Engine;
use crate::exec::guard::Guard;
use crate::exec::node::Node;
use crate::exec::quorum::Quorum;
use crate::machine::lease::Lease;
use crate::machine::limit::DEFAULT_NODE_TIMEOUT;
use crate::machine::settings::Settings;

/// The lock surface over N independent Redis masters (use an odd N, 3 or 5).
///
/// ```no_run
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let clients: Vec<redis::Client> = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"]
///     .into_iter()
///     .map(redis::Client::open)
///     .collect::<Result<_, _>>()?;
/// let redlock = lockscript::Redlock::connect(&clients).await?;
/// let guard = redlock.lock("orders:42").await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct Redlock<C = ConnectionManager> {
    engine: Engine<Quorum<C>>,
}

impl<C> Clone for Redlock<C> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
        }
    }
}

impl<C> fmt::Debug for Redlock<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.engine.backend.nodes.len())
            .field("settings", &self.engine.settings)
            .finish_non_exhaustive()
    }
}

impl Redlock<ConnectionManager> {
    /// One managed connection per master. Connections are made lazily and remade after
    /// failures, so a master that is down now does not stop the others from working.
    ///
    /// ```no_run
    /// # async fn demo(clients: Vec<redis::Client>) -> Result<(), lockscript::LockError> {
    /// let redlock = lockscript::Redlock::connect(&clients).await?;
    /// # Ok(())
    /// # }
    /// ```
    // Async although it awaits nothing: the lazy managers need a tokio runtime to be
    // current, which an async fn guarantees, and connect() reads like Locks::connect.
    #[allow(clippy::unused_async)]
    pub async fn connect(clients: &[redis::Client]) -> Result<Self, LockError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(DEFAULT_NODE_TIMEOUT * 4))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200))
            // Every round bounds each master with the node timeout.
            .set_response_timeout(None);
        let nodes = clients
            .iter()
            .map(|client| ConnectionManager::new_lazy_with_config(client.clone(), config.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(nodes))
    }
}

impl<C> Redlock<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Uses the given connections, one per independent master.
    ///
    /// ```no_run
    /// # async fn demo(clients: Vec<redis::Client>) -> Result<(), lockscript::LockError> {
    /// let mut conns = Vec::new();
    /// for client in &clients {
    ///     conns.push(client.get_multiplexed_async_connection().await?);
    /// }
    /// let redlock = lockscript::Redlock::new(conns);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(nodes: Vec<C>) -> Self {
        let backend = Quorum {
            nodes: nodes.into_iter().map(Node::new).collect(),
        };
        Self {
            engine: Engine::new(backend, Settings::default()),
        }
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.engine.settings)
    }

    /// The lease each grant asks for. See [`Locks::ttl`](crate::Locks::ttl).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.ttl(std::time::Duration::from_secs(10))
    /// # }
    /// ```
    #[must_use]
    pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
        self.settings_mut().ttl = ttl;
        self
    }

    /// How long `lock()` waits before `LockError::Timeout`. See
    /// [`Locks::wait_timeout`](crate::Locks::wait_timeout).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.wait_timeout(std::time::Duration::from_secs(2))
    /// # }
    /// ```
    #[must_use]
    pub fn wait_timeout(mut self, wait: std::time::Duration) -> Self {
        self.settings_mut().wait_timeout = wait;
        self
    }

    /// Renew leases every ttl/3 while guards live. See
    /// [`Locks::watchdog`](crate::Locks::watchdog).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.watchdog(false)
    /// # }
    /// ```
    #[must_use]
    pub fn watchdog(mut self, on: bool) -> Self {
        self.settings_mut().watchdog = on;
        self
    }

    /// Caps how long the watchdog keeps a lock: after `cap`, renewals stop and the lease
    /// runs out (then its loss is signalled). See
    /// [`Locks::max_hold`](crate::Locks::max_hold).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.max_hold(std::time::Duration::from_secs(300))
    /// # }
    /// ```
    #[must_use]
    pub fn max_hold(mut self, cap: std::time::Duration) -> Self {
        self.settings_mut().max_hold = Some(cap);
        self
    }

    /// The key prefix: lock `name` lives at `<prefix>{name}`. See
    /// [`Locks::prefix`](crate::Locks::prefix).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.prefix("billing:lock:")
    /// # }
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.settings_mut().prefix = std::sync::Arc::from(prefix);
        self
    }

    /// How long one command may wait for the server's reply before the call fails with a
    /// timeout (a [`LockError::Redis`](crate::LockError::Redis) whose `is_timeout()` is
    /// true). See [`Locks::response_timeout`](crate::Locks::response_timeout).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.response_timeout(std::time::Duration::from_millis(200))
    /// # }
    /// ```
    #[must_use]
    pub fn response_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.settings_mut().response_timeout = timeout;
        self
    }

    /// How long a lock's fencing counter (`<prefix>{name}:fence`) outlives the lease of its
    /// last grant. See [`Locks::fence_retention`](crate::Locks::fence_retention).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.fence_retention(std::time::Duration::from_secs(24 * 60 * 60))
    /// # }
    /// ```
    #[must_use]
    pub fn fence_retention(mut self, retention: std::time::Duration) -> Self {
        self.settings_mut().fence_retention = retention;
        self
    }

    /// How waiters pace their attempts; see [`RetryPolicy`](crate::RetryPolicy). See
    /// [`Locks::retry`](crate::Locks::retry).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.retry(lockscript::RetryPolicy::new(Duration::from_millis(2), Duration::from_millis(50)))
    /// # }
    /// ```
    #[must_use]
    pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
        self.settings_mut().retry = policy;
        self
    }

    /// How the lock scripts reach the server: [`Delivery::Scripts`](crate::Delivery)
    /// (EVALSHA, the default) or [`Delivery::Functions`](crate::Delivery) (FCALL of the
    /// binary's function library, loaded on the first call that misses it). See
    /// [`Locks::delivery`](crate::Locks::delivery).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.delivery(lockscript::Delivery::Functions)
    /// # }
    /// ```
    #[must_use]
    pub fn delivery(mut self, delivery: crate::Delivery) -> Self {
        self.settings_mut().delivery = delivery;
        self
    }

    /// Fair mode needs the lock's queue on one server or one Redis Cluster: a Redlock
    /// handle refuses it with [`LockError::InvalidSettings`] at its first call. See
    /// [`Locks::fair`](crate::Locks::fair).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Redlock) -> lockscript::Redlock {
    /// locks.fair(true)
    /// # }
    /// ```
    #[must_use]
    pub fn fair(mut self, on: bool) -> Self {
        self.settings_mut().fair = on;
        self
    }

    /// Native renewals and releases on each master that offers them; see
    /// [`Locks::native_commands`](crate::Locks::native_commands). Default on.
    ///
    /// ```no_run
    /// # fn f(redlock: lockscript::Redlock) -> lockscript::Redlock {
    /// redlock.native_commands(false)
    /// # }
    /// ```
    #[must_use]
    pub fn native_commands(mut self, on: bool) -> Self {
        self.settings_mut().native = on;
        self
    }

    /// What each master was found to offer, in the order of the masters (`None` for
    /// one not asked yet); see [`Locks::offered_commands`](crate::Locks::offered_commands).
    ///
    /// ```no_run
    /// # fn f(redlock: lockscript::Redlock) {
    /// println!("{:?}", redlock.offered_commands());
    /// # }
    /// ```
    #[must_use]
    pub fn offered_commands(&self) -> Vec<Option<crate::NativeCommands>> {
        let nodes = self.engine.backend.nodes.iter();
        nodes.map(|node| node.offered.get()).collect()
    }

    /// How long one master may take to answer before it counts as failed for that
    /// round. Default [`DEFAULT_NODE_TIMEOUT`]; must be above zero and at most a third
    /// of the ttl. An attempt takes at most three rounds (acquire, raise the fencing
    /// counters, undo), so `try_lock` returns within three node timeouts.
    ///
    /// ```no_run
    /// # fn f(r: lockscript::Redlock) -> lockscript::Redlock {
    /// r.node_timeout(std::time::Duration::from_millis(20))
    /// # }
    /// ```
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.settings_mut().node_timeout = timeout;
        self
    }

    /// How many masters must agree: N/2+1.
    ///
    /// ```no_run
    /// # fn f(r: lockscript::Redlock) { assert_eq!(r.quorum(), 3); } // with 5 masters
    /// ```
    pub fn quorum(&self) -> usize {
        self.engine.backend.quorum()
    }

    fn validate(&self) -> Result<(), LockError> {
        let settings = &self.engine.settings;
        if self.engine.backend.nodes.is_empty() {
            return Err(LockError::InvalidSettings(
                "Redlock needs at least one master (use 3 or 5)".to_owned(),
            ));
        }
        let timeout = settings.node_timeout;
        if timeout.is_zero() || timeout > settings.ttl / 3 {
            return Err(LockError::InvalidSettings(format!(
                "node_timeout {timeout:?} must be above zero and at most a third of the ttl {:?}",
                settings.ttl
            )));
        }
        Ok(())
    }

    /// One attempt: `Ok(Some(guard))` when a majority granted in time, `Ok(None)`
    /// otherwise (and nothing is left held).
    ///
    /// ```no_run
    /// # async fn demo(r: lockscript::Redlock) -> Result<(), lockscript::LockError> {
    /// if let Some(guard) = r.try_lock("reports").await? { guard.release().await?; }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, name: &str) -> Result<Option<RedlockGuard<C>>, LockError> {
        self.validate()?;
        Ok(self
            .engine
            .try_lock(name)
            .await?
            .map(|inner| RedlockGuard { inner }))
    }

    /// Retries attempts, with a random delay between them, until one succeeds or
    /// `wait_timeout` passes ([`LockError::Timeout`], or the last error when too few
    /// masters answered). Returns within `wait_timeout` plus one attempt (three node
    /// timeouts).
    ///
    /// ```no_run
    /// # async fn demo(r: lockscript::Redlock) -> Result<(), lockscript::LockError> {
    /// let guard = r.lock("orders:42").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self, name: &str) -> Result<RedlockGuard<C>, LockError> {
        self.validate()?;
        let watchdog = self.engine.settings.watchdog;
        let inner = self.engine.lock(name, watchdog).await?;
        Ok(RedlockGuard { inner })
    }

    /// Runs `work` while holding the lock (watchdog on); see [`crate::Locks::with_lock`].
    ///
    /// ```no_run
    /// # async fn demo(r: lockscript::Redlock) -> Result<(), lockscript::LockError> {
    /// let fence = r.with_lock("ledger", |lease| async move { lease.fencing_token() }).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<T, F, Fut>(&self, name: &str, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.validate()?;
        self.engine.with_lock(name, work).await
    }
}

/// Ownership of one Redlock grant. The same surface as [`crate::LockGuard`].
///
/// ```no_run
/// # async fn demo(r: lockscript::Redlock) -> Result<(), lockscript::LockError> {
/// let guard = r.lock("orders:42").await?;
/// println!("{} valid for {:?}", guard.fencing_token(), guard.remaining());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct RedlockGuard<C = ConnectionManager>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    inner: Guard<Quorum<C>>,
}

impl<C> RedlockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A cloneable view of this lease (name, fencing token, loss signal), e.g. to hand
    /// to another task. The guard derefs to the same [`Lease`](crate::Lease).
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::RedlockGuard) { let lease = guard.lease(); }
    /// ```
    pub fn lease(&self) -> crate::Lease {
        self.inner.held.clone()
    }

    /// Asks the masters whether the lock still holds this guard's token on a majority. A `false`
    /// also fires the loss signal; after the loss signal it is always `false`. Returns
    /// within the node timeout.
    ///
    /// ```no_run
    /// # async fn f(guard: lockscript::RedlockGuard) -> Result<(), lockscript::LockError> {
    /// if !guard.is_held().await? { eprintln!("lost"); }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_held(&self) -> Result<bool, LockError> {
        self.inner.is_held().await
    }

    /// Sets the lease to `ttl` from now, if the lock is still  on a majority within the
    /// validity; the watchdog then
    /// renews with this length. [`LockError::NotHeld`] (and nothing changed) if it is
    /// not, or if the lease was already lost.
    ///
    /// ```no_run
    /// # async fn f(guard: lockscript::RedlockGuard) -> Result<(), lockscript::LockError> {
    /// guard.extend(std::time::Duration::from_secs(60)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, ttl: std::time::Duration) -> Result<(), LockError> {
        self.inner.extend(ttl).await
    }

    /// Stops renewals, then deletes the lock on every master. [`LockError::NotHeld`]
    /// if fewer than a majority still held it or the lease had been lost.
    ///
    /// ```no_run
    /// # async fn f(g: lockscript::RedlockGuard) -> Result<(), lockscript::LockError> {
    /// g.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        self.inner.release().await
    }
}

/// A guard is its lease: `guard.fencing_token()`, `guard.lost()`, `guard.is_lost()` and
/// the other methods of [`Lease`](crate::Lease).
impl<C> std::ops::Deref for RedlockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Target = crate::Lease;

    fn deref(&self) -> &crate::Lease {
        &self.inner.held
    }
}

impl<C> fmt::Debug for RedlockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.held.lease.debug(f, "RedlockGuard")
    }
}
