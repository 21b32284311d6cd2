//! Redlock: the lock surface over N independent Redis masters, a thin face over the
//! engine with a quorum [`Backend`].
//!
//! The algorithm of the Redis "Distributed Locks with Redis" page. An attempt runs
//! acquire-with-retry.lua on every master in parallel, each bounded by a per-node
//! timeout much smaller than the TTL, so a node that is down or stalled costs at most
//! that timeout. The attempt succeeds when a majority (N/2+1) granted it and the lease
//! is still valid: validity = ttl − elapsed − (ttl·1% + 2 ms), counted on this
//! process's monotonic clock from before the first command was sent. Otherwise the
//! attempt is undone on every master (including the ones that seemed to fail: their
//! reply may have been lost, not their write), and `lock()` retries after a random
//! delay within `wait_timeout`. Extension needs a majority within the validity too,
//! and the lease is lost when the validity passes without one.
//!
//! Fencing tokens: each master keeps its own counter, so no single counter orders all
//! grants. After a majority granted, the client takes the highest counter value it saw
//! as the grant's token and raises the counter to that value on the granting masters
//! (raise-fence.lua), and the grant only stands if a majority confirmed the raise
//! within the validity. Any later grant needs a majority too, which shares at least
//! one master with that one; on it, the later grant's INCR runs after this grant's key
//! there was released or expired, so after the raise, and returns more than this
//! token. Tokens therefore rise strictly across grants, under Redlock's own timing
//! assumptions (bounded clock drift and pauses shorter than the validity margin).
//! There are no release notifications across masters: waiters pace themselves with
//! the retry policy.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::ConnectionManager;

use crate::LockError;
use crate::backend::Backend;
use crate::engine::Engine;
use crate::grant::Outcome;
use crate::guard::Guard;
use crate::key::Keys;
use crate::lease::Lease;
use crate::limit::{DEFAULT_NODE_TIMEOUT, validity};
use crate::reply::{Acquired, Confirmed};
use crate::settings::Settings;
use crate::token::Token;

/// N independent masters, each through its own connection.
pub(crate) struct Quorum<C> {
    nodes: Arc<[C]>,
}

impl<C> Clone for Quorum<C> {
    fn clone(&self) -> Self {
        Self {
            nodes: Arc::clone(&self.nodes),
        }
    }
}

/// What each master answered in one round (`None`: an error or no reply in time).
struct Round<T> {
    replies: Vec<Option<T>>,
}

impl<T> Round<T> {
    fn count(&self, ok: impl Fn(&T) -> bool) -> usize {
        self.replies.iter().flatten().filter(|r| ok(r)).count()
    }

    fn answered(&self) -> usize {
        self.replies.iter().flatten().count()
    }
}

/// Redlock's rule: a grant stands when a majority confirmed it and its validity, `ttl`
/// minus the time since `start` (before the first command) minus the drift allowance, is
/// still positive at `now`.
fn stands(confirmed: usize, quorum: usize, start: Instant, now: Instant, ttl: Duration) -> bool {
    confirmed >= quorum && now < start + validity(ttl)
}

/// The error of a round that too few masters answered in time. The scripts may have
/// run on the others.
fn too_few_answered(answered: usize, of: usize) -> LockError {
    LockError::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("only {answered} of {of} Redlock masters answered within the node timeout"),
    )))
}

impl<C> Quorum<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs one call on every master in parallel, each bounded by the node timeout.
    async fn round<T, F, Fut>(&self, settings: &Settings, call: F) -> Round<T>
    where
        F: Fn(C) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        let replies = join_all(self.nodes.iter().map(|node| {
            let fut = call(node.clone());
            async move {
                match tokio::time::timeout(settings.node_timeout, fut).await {
                    Ok(Ok(reply)) => Some(reply),
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "redlock: a master failed");
                        None
                    }
                    Err(_) => {
                        tracing::debug!("redlock: a master timed out");
                        None
                    }
                }
            }
        }))
        .await;
        Round { replies }
    }

    async fn release_round(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
    ) -> Round<Confirmed> {
        self.round(settings, |mut conn| async move {
            settings
                .release_call(keys, token.as_str())
                .invoke_async(&mut conn)
                .await
        })
        .await
    }
}

impl<C> Backend for Quorum<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    const HANDOVER: bool = false;
    const ONE_NODE: bool = false;

    async fn acquire(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
    ) -> Result<Outcome, LockError> {
        let ttl = settings.ttl;
        let start = Instant::now();
        let acquired = self
            .round(settings, |mut conn| async move {
                settings
                    .acquire_call(keys, token.as_str())
                    .invoke_async(&mut conn)
                    .await
            })
            .await;
        let granted: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| matches!(acquired.replies[i], Some(Acquired(1, _))))
            .collect();
        let fence = acquired
            .replies
            .iter()
            .flatten()
            .filter(|Acquired(ok, _)| *ok == 1)
            .map(|Acquired(_, f)| u64::try_from(*f).unwrap_or_default())
            .max()
            .unwrap_or_default();
        let mut confirmed = 0;
        if granted.len() >= self.quorum() {
            // Raise the counters of the granting masters to the token (see the module
            // docs for why this makes tokens rise across different majorities).
            let raised = join_all(granted.iter().map(|&i| {
                let mut conn = self.nodes[i].clone();
                async move {
                    tokio::time::timeout(
                        settings.node_timeout,
                        settings
                            .raise_fence_call(keys, fence)
                            .invoke_async(&mut conn),
                    )
                    .await
                }
            }))
            .await;
            confirmed = raised
                .iter()
                .filter(|r| matches!(r, Ok(Ok(v)) if u64::try_from(*v).is_ok_and(|v| v >= fence)))
                .count();
        }
        if stands(confirmed, self.quorum(), start, Instant::now(), ttl) {
            tracing::debug!(lock = %keys.name, fence, granted = granted.len(), "redlock acquired");
            return Ok(Outcome::Granted { fence, sent: start });
        }
        // Undo everywhere: a master that seemed to fail may have granted all the same.
        // A master that does not answer the undo either keeps the grant pending: the
        // engine releases it in the background.
        let undone = self.release_round(settings, keys, token).await;
        let answered = acquired.answered();
        if answered < self.quorum() {
            return Err(too_few_answered(answered, self.nodes.len()));
        }
        if undone.answered() < self.nodes.len() {
            return Err(too_few_answered(undone.answered(), self.nodes.len()));
        }
        Ok(Outcome::Held { remaining: None })
    }

    async fn renew(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
        ttl: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let start = Instant::now();
        let round = self
            .round(settings, |mut conn| async move {
                settings
                    .renew_call(keys, token.as_str(), ttl)
                    .invoke_async(&mut conn)
                    .await
            })
            .await;
        let renewed = round.count(|r| r.0);
        let refused = round.count(|r| !r.0);
        if renewed >= self.quorum() && Instant::now() < start + validity(ttl) {
            Ok(Some(start))
        } else if refused > self.nodes.len() - self.quorum() {
            // A majority no longer holds our token: it cannot come back.
            Ok(None)
        } else {
            Err(too_few_answered(renewed, self.nodes.len()))
        }
    }

    async fn release(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
    ) -> Result<bool, LockError> {
        let round = self.release_round(settings, keys, token).await;
        let deleted = round.count(|d| d.0);
        if deleted >= self.quorum() {
            Ok(true)
        } else if round.answered() == self.nodes.len() {
            Ok(false)
        } else {
            Err(too_few_answered(round.answered(), self.nodes.len()))
        }
    }

    async fn holds(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
    ) -> Result<bool, LockError> {
        let (lock, token) = (&keys.lock, token.as_str());
        let round = self
            .round(settings, |mut conn| async move {
                let value: Option<String> =
                    redis::cmd("GET").arg(lock).query_async(&mut conn).await?;
                Ok(value.as_deref() == Some(token))
            })
            .await;
        let holding = round.count(|ours| *ours);
        let not = round.count(|ours| !*ours);
        if holding >= self.quorum() {
            Ok(true)
        } else if not > self.nodes.len() - self.quorum() {
            Ok(false)
        } else {
            Err(too_few_answered(round.answered(), self.nodes.len()))
        }
    }
}

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
            nodes: nodes.into(),
        };
        Self {
            engine: Engine::new(backend, Settings::default()),
        }
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.engine.settings)
    }

    crate::settings::settings_builder!("lockscript::Redlock");

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
    crate::guard::async_guard_methods!("lockscript::RedlockGuard");

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

impl<C> fmt::Debug for RedlockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.held().lease.debug(f, "RedlockGuard")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_stands_only_with_a_majority_within_its_validity() {
        let start = Instant::now();
        let ttl = Duration::from_millis(100);
        let at = |ms| start + Duration::from_millis(ms);
        assert!(stands(3, 3, start, at(96), ttl));
        assert!(!stands(2, 3, start, at(1), ttl), "no majority");
        // 100 ms - 1 ms (1%) - 2 ms: at 97 ms the lease it granted is over.
        assert!(!stands(3, 3, start, at(97), ttl), "majority, but too late");
        assert!(!stands(5, 3, start, at(500), ttl));
    }
}
