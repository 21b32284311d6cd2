//! Redlock: the lock surface over N independent Redis masters.
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
//! and the loss signal fires when the validity passes without one.
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
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::ConnectionManager;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::queue::LocalQueue;
use crate::settings::{Keys, Settings, check_ttl, millis, validity};
use crate::token::Token;
use crate::watchdog::{Lease, LeaseState, retry_delay};
use crate::{LockError, builtin};

/// The per-node timeout unless set: 50 ms, far below any useful TTL, as the Redlock
/// description advises (5-50 ms for a 10 s TTL).
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// The lock surface over N independent Redis masters (use an odd N, 3 or 5).
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_runtime::LockError> {
/// let clients: Vec<redis::Client> = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"]
///     .into_iter()
///     .map(redis::Client::open)
///     .collect::<Result<_, _>>()?;
/// let redlock = lock_runtime::Redlock::connect(&clients).await?;
/// let guard = redlock.lock("orders:42").await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct Redlock<C = ConnectionManager> {
    nodes: Arc<[C]>,
    settings: Arc<Settings>,
    node_timeout: Duration,
    queue: Arc<LocalQueue>,
}

impl<C> Clone for Redlock<C> {
    fn clone(&self) -> Self {
        Self {
            nodes: Arc::clone(&self.nodes),
            settings: Arc::clone(&self.settings),
            node_timeout: self.node_timeout,
            queue: Arc::clone(&self.queue),
        }
    }
}

impl<C> fmt::Debug for Redlock<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.nodes.len())
            .field("settings", &self.settings)
            .field("node_timeout", &self.node_timeout)
            .finish_non_exhaustive()
    }
}

impl Redlock<ConnectionManager> {
    /// One managed connection per master. Connections are made lazily and remade after
    /// failures, so a master that is down now does not stop the others from working.
    ///
    /// ```no_run
    /// # async fn demo(clients: Vec<redis::Client>) -> Result<(), lock_runtime::LockError> {
    /// let redlock = lock_runtime::Redlock::connect(&clients).await?;
    /// # Ok(())
    /// # }
    /// ```
    // Async although it awaits nothing: the lazy managers need a tokio runtime to be
    // current, which an async fn guarantees, and connect() reads like Locks::connect.
    #[allow(clippy::unused_async)]
    pub async fn connect(clients: &[redis::Client]) -> Result<Self, LockError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(DEFAULT_NODE_TIMEOUT * 4))
            .set_number_of_retries(1);
        let nodes = clients
            .iter()
            .map(|client| ConnectionManager::new_lazy_with_config(client.clone(), config.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(nodes))
    }
}

/// What each master answered in one round.
struct Round<T> {
    replies: Vec<Option<T>>,
}

impl<T> Round<T> {
    fn count(&self, ok: impl Fn(&T) -> bool) -> usize {
        self.replies.iter().flatten().filter(|r| ok(r)).count()
    }
}

impl<C> Redlock<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Uses the given connections, one per independent master.
    ///
    /// ```no_run
    /// # async fn demo(clients: Vec<redis::Client>) -> Result<(), lock_runtime::LockError> {
    /// let mut conns = Vec::new();
    /// for client in &clients {
    ///     conns.push(client.get_multiplexed_async_connection().await?);
    /// }
    /// let redlock = lock_runtime::Redlock::new(conns);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(nodes: Vec<C>) -> Self {
        Self {
            nodes: nodes.into(),
            settings: Arc::new(Settings::default()),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            queue: Arc::default(),
        }
    }

    crate::settings::settings_builder!("lock_runtime::Redlock");

    /// How long one master may take to answer before it counts as failed for that
    /// round. Default [`DEFAULT_NODE_TIMEOUT`]; must be well below the ttl.
    ///
    /// ```no_run
    /// # fn f(r: lock_runtime::Redlock) -> lock_runtime::Redlock {
    /// r.node_timeout(std::time::Duration::from_millis(20))
    /// # }
    /// ```
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// How many masters must agree: N/2+1.
    ///
    /// ```no_run
    /// # fn f(r: lock_runtime::Redlock) { assert_eq!(r.quorum(), 3); } // with 5 masters
    /// ```
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    fn validate(&self) -> Result<(), LockError> {
        self.settings.validate()?;
        if self.nodes.is_empty() {
            return Err(LockError::InvalidSettings(
                "Redlock needs at least one master (use 3 or 5)".to_owned(),
            ));
        }
        if self.node_timeout.is_zero() || self.node_timeout * 3 > self.settings.ttl {
            return Err(LockError::InvalidSettings(format!(
                "node_timeout {:?} must be above zero and well below the ttl {:?} (at most a third)",
                self.node_timeout, self.settings.ttl
            )));
        }
        Ok(())
    }

    /// Runs one script on every master in parallel, each bounded by the node timeout.
    async fn round<T, F, Fut>(&self, call: F) -> Round<T>
    where
        F: Fn(C) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        let replies = join_all(self.nodes.iter().map(|node| {
            let fut = call(node.clone());
            async move {
                match tokio::time::timeout(self.node_timeout, fut).await {
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

    /// compare-del on every master; returns how many deleted.
    async fn release_everywhere(&self, keys: &Keys, token: &Token) -> usize {
        self.round(|mut conn| async move {
            builtin::compare_del(&keys.lock, token.as_str())
                .invoke_async(&mut conn)
                .await
        })
        .await
        .count(|deleted| *deleted == 1)
    }

    /// One Redlock attempt: a grant with its token and validity start, or `None`.
    async fn attempt(
        &self,
        keys: &Keys,
        token: &Token,
    ) -> Result<Option<(u64, Instant)>, LockError> {
        let ttl = self.settings.ttl;
        let start = Instant::now();
        let acquired = self
            .round(|mut conn| async move {
                builtin::acquire(&keys.lock, &keys.fence, token.as_str(), millis(ttl))
                    .invoke_async(&mut conn)
                    .await
            })
            .await;
        let granted: Vec<usize> = acquired
            .replies
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r, Some((1, _))))
            .map(|(i, _)| i)
            .collect();
        let fence = acquired
            .replies
            .iter()
            .flatten()
            .filter(|(ok, _)| *ok == 1)
            .map(|(_, f)| u64::try_from(*f).unwrap_or_default())
            .max()
            .unwrap_or_default();
        let mut confirmed = 0;
        if granted.len() >= self.quorum() {
            // Raise the counters of the granting masters to the token (see the module
            // docs for why this makes tokens rise across different majorities).
            let raised = join_all(granted.iter().map(|&i| {
                let mut conn = self.nodes[i].clone();
                let fence_key = &keys.fence;
                async move {
                    tokio::time::timeout(
                        self.node_timeout,
                        builtin::raise_fence(fence_key, fence).invoke_async(&mut conn),
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
        let still_valid = Instant::now() < start + validity(ttl);
        if confirmed >= self.quorum() && still_valid {
            tracing::debug!(lock = %keys.name, fence, granted = granted.len(), "redlock acquired");
            return Ok(Some((fence, start)));
        }
        // Undo everywhere: a master that seemed to fail may have granted all the same.
        self.release_everywhere(keys, token).await;
        Ok(None)
    }

    /// One attempt: `Ok(Some(guard))` when a majority granted in time, `Ok(None)`
    /// otherwise (and nothing is left held).
    ///
    /// ```no_run
    /// # async fn demo(r: lock_runtime::Redlock) -> Result<(), lock_runtime::LockError> {
    /// if let Some(guard) = r.try_lock("reports").await? { guard.release().await?; }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, name: &str) -> Result<Option<RedlockGuard<C>>, LockError> {
        self.validate()?;
        let keys = self.settings.keys(name)?;
        let token = Token::new()?;
        let started = Instant::now();
        Ok(self.attempt(&keys, &token).await?.map(|(fence, start)| {
            self.guard(
                keys,
                token,
                fence,
                start,
                started,
                1,
                self.settings.watchdog,
            )
        }))
    }

    /// Retries attempts, with a random delay between them, until one succeeds or
    /// `wait_timeout` passes ([`LockError::Timeout`]).
    ///
    /// ```no_run
    /// # async fn demo(r: lock_runtime::Redlock) -> Result<(), lock_runtime::LockError> {
    /// let guard = r.lock("orders:42").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self, name: &str) -> Result<RedlockGuard<C>, LockError> {
        self.lock_with(name, self.settings.watchdog).await
    }

    async fn lock_with(&self, name: &str, watchdog: bool) -> Result<RedlockGuard<C>, LockError> {
        self.validate()?;
        self.settings.validate_wait()?;
        let keys = self.settings.keys(name)?;
        let token = Token::new()?;
        let started = Instant::now();
        let deadline = started + self.settings.wait_timeout;
        let timeout = |attempts| LockError::Timeout {
            name: name.to_owned(),
            waited: started.elapsed(),
            attempts,
        };
        let Ok(_turn) = tokio::time::timeout_at(deadline, self.queue.turn(&keys.name)).await else {
            return Err(timeout(0));
        };
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            if let Some((fence, start)) = self.attempt(&keys, &token).await? {
                return Ok(self.guard(keys, token, fence, start, started, attempts, watchdog));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timeout(attempts));
            }
            let nap = self.settings.retry.nap(attempts - 1, None, deadline - now);
            tokio::time::sleep(nap).await;
        }
    }

    /// Runs `work` while holding the lock (watchdog on); see [`crate::Locks::with_lock`].
    ///
    /// ```no_run
    /// # async fn demo(r: lock_runtime::Redlock) -> Result<(), lock_runtime::LockError> {
    /// let fence = r.with_lock("ledger", |lease| async move { lease.fencing_token() }).await?;
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

    #[allow(clippy::too_many_arguments)]
    fn guard(
        &self,
        keys: Keys,
        token: Token,
        fence: u64,
        start: Instant,
        started: Instant,
        attempts: u32,
        watchdog: bool,
    ) -> RedlockGuard<C> {
        let state = Arc::new(LeaseState::new(
            keys,
            fence,
            token.as_str(),
            &self.settings,
            start,
            watchdog,
        ));
        let stop = Arc::new(Notify::new());
        tokio::spawn(watch(
            self.clone(),
            Arc::clone(&state),
            token.clone(),
            Arc::clone(&stop),
        ));
        RedlockGuard {
            redlock: self.clone(),
            state,
            token,
            stop,
            released: false,
            waited: start.saturating_duration_since(started),
            attempts,
        }
    }

    /// renew.lua on every master; the new validity start when a majority renewed in
    /// time.
    async fn extend_everywhere(
        &self,
        keys: &Keys,
        token: &Token,
        ttl: Duration,
    ) -> Option<Instant> {
        let start = Instant::now();
        let renewed = self
            .round(|mut conn| async move {
                builtin::renew(&keys.lock, token.as_str(), millis(ttl))
                    .invoke_async(&mut conn)
                    .await
            })
            .await
            .count(|r| *r == 1);
        (renewed >= self.quorum() && Instant::now() < start + validity(ttl)).then_some(start)
    }
}

/// The lease monitor of one Redlock grant: quorum renewals at ttl/3, and the loss
/// signal when the validity passes without one.
async fn watch<C>(redlock: Redlock<C>, lease: Arc<LeaseState>, token: Token, stop: Arc<Notify>)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(lease.next_action()) => {}
            () = stop.notified() => {}
        }
        if lease.stopping() || lease.is_lost() {
            return;
        }
        let now = Instant::now();
        if lease.expired(now) {
            lease.mark_lost("the lease ran out before a majority renewed it");
            return;
        }
        if !lease.renewal_due(now) || !lease.begin_renewal() {
            continue;
        }
        let ttl = lease.ttl();
        let renewed = redlock.extend_everywhere(&lease.keys, &token, ttl).await;
        lease.end_renewal();
        if let Some(start) = renewed {
            lease.renewed(start, ttl);
        } else {
            let retry = retry_delay(ttl);
            lease.retry_renewal_at(Instant::now() + retry);
            tracing::warn!(lock = %lease.keys.name, retry_in = ?retry, "redlock renewal missed a majority");
        }
    }
}

/// Ownership of one Redlock grant. The same surface as [`crate::LockGuard`].
///
/// ```no_run
/// # async fn demo(r: lock_runtime::Redlock) -> Result<(), lock_runtime::LockError> {
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
    redlock: Redlock<C>,
    state: Arc<LeaseState>,
    token: Token,
    stop: Arc<Notify>,
    released: bool,
    waited: Duration,
    attempts: u32,
}

impl<C> RedlockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    crate::watchdog::lease_accessors!("lock_runtime::RedlockGuard");

    /// Asks every master whether it still holds this guard's token: `true` while a
    /// majority does and the loss signal has not fired. A `false` fires it.
    ///
    /// ```no_run
    /// # async fn f(g: lock_runtime::RedlockGuard) -> Result<(), lock_runtime::LockError> {
    /// if !g.is_held().await? { eprintln!("lost"); }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_held(&self) -> Result<bool, LockError> {
        let (lock, token) = (&self.state.keys.lock, self.token.as_str());
        let holding = self
            .redlock
            .round(|mut conn| async move {
                let value: Option<String> =
                    redis::cmd("GET").arg(lock).query_async(&mut conn).await?;
                Ok(value.as_deref() == Some(token))
            })
            .await
            .count(|ours| *ours);
        if holding < self.redlock.quorum() {
            self.state
                .mark_lost("fewer than a majority still hold the key");
        }
        Ok(holding >= self.redlock.quorum() && !self.state.is_lost())
    }

    /// Extends the lease to `ttl` on a majority within the validity; otherwise
    /// [`LockError::NotHeld`] (and the loss signal fires).
    ///
    /// ```no_run
    /// # async fn f(g: lock_runtime::RedlockGuard) -> Result<(), lock_runtime::LockError> {
    /// g.extend(std::time::Duration::from_secs(30)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        check_ttl(ttl)?;
        if self.state.is_lost() {
            return Err(self.not_held());
        }
        let renewed = self
            .redlock
            .extend_everywhere(&self.state.keys, &self.token, ttl);
        if let Some(start) = renewed.await {
            self.state.renewed(start, ttl);
            self.stop.notify_one();
            Ok(())
        } else {
            self.state.mark_lost("an extension missed a majority");
            Err(self.not_held())
        }
    }

    /// Stops renewals (waiting for one in flight), then deletes the lock on every
    /// master. [`LockError::NotHeld`] if fewer than a majority still held it or the loss
    /// signal had fired.
    ///
    /// ```no_run
    /// # async fn f(g: lock_runtime::RedlockGuard) -> Result<(), lock_runtime::LockError> {
    /// g.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<(), LockError> {
        if self.state.stop() {
            self.state.renewal_finished().await;
        }
        self.stop.notify_one();
        let lost_before = self.state.is_lost();
        let deleted = self
            .redlock
            .release_everywhere(&self.state.keys, &self.token)
            .await;
        self.released = true;
        if deleted >= self.redlock.quorum() && !lost_before {
            Ok(())
        } else {
            self.state.mark_lost("released after the lease was lost");
            Err(self.not_held())
        }
    }

    fn not_held(&self) -> LockError {
        LockError::NotHeld {
            name: self.state.keys.name.clone(),
        }
    }
}

impl<C> Drop for RedlockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let in_flight = self.state.stop();
        self.stop.notify_one();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (redlock, state, token) = (
            self.redlock.clone(),
            Arc::clone(&self.state),
            self.token.clone(),
        );
        runtime.spawn(async move {
            if in_flight {
                state.renewal_finished().await;
            }
            redlock.release_everywhere(&state.keys, &token).await;
        });
    }
}

impl<C> fmt::Debug for RedlockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.state.keys.name)
            .field("fencing_token", &self.state.fence)
            .field("lost", &self.state.is_lost())
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}
