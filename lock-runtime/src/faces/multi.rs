//! Multi-locks: [`Locks::lock_all`] and [`Locks::try_lock_all`] take several names at
//! once, all or nothing, and give a [`MultiGuard`]. The rules are the machine's
//! ([`crate::machine::multi`]); this is the surface.

use std::fmt;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;

use crate::LockError;
use crate::faces::locks::{LockGuard, Locks};
use crate::machine::multi::Held;

impl<C> Locks<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Takes every one of `names` at once, all or nothing, waiting as
    /// [`lock`](Locks::lock) does (the held name's release notification, its remaining
    /// lease, the handle's backoff) until `wait_timeout`; then
    /// [`LockError::Timeout`] and nothing is held.
    ///
    /// Each name gets its own fencing token and all share one owner token and one lease,
    /// renewed together by the watchdog. Names that live on one server (or in one Cluster
    /// slot) are taken by one script call, one round trip. On a Cluster, names of several
    /// slots are taken one slot after another, in the order every caller uses (by slot,
    /// then by name): two multi-locks with overlapping names never wait for each other in
    /// a circle. A failure midway releases what was taken before the call returns.
    ///
    /// It returns within `wait_timeout` plus one response timeout, plus one more when it
    /// must release groups it took before failing. A name given twice, no names, or more
    /// than [`MAX_NAMES`](crate::MAX_NAMES) are [`LockError::InvalidSettings`]; so is a
    /// handle in fair mode or with `wait_for_replicas` (multi-locks do not queue).
    ///
    /// ```no_run
    /// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    /// let both = locks.lock_all(&["account:1", "account:2"]).await?;
    /// let from = both.fencing_token("account:1").unwrap();
    /// let to = both.fencing_token("account:2").unwrap();
    /// println!("moving money with fences {from} and {to}");
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_all<S: AsRef<str>>(&self, names: &[S]) -> Result<MultiGuard<C>, LockError> {
        let guards = self.engine.grant_all(names, true).await?;
        let guards = guards.ok_or_else(|| {
            LockError::InvalidSettings("internal: a multi-lock's wait ended held".into())
        })?;
        Ok(MultiGuard::of(guards))
    }

    /// One attempt at every one of `names` (one per slot on a Cluster): the guard, or
    /// `Ok(None)` when one of them is held, and then nothing is held. Within one response
    /// timeout per slot group (plus one to release on a Cluster).
    ///
    /// ```no_run
    /// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    /// match locks.try_lock_all(&["account:1", "account:2"]).await? {
    ///     Some(both) => both.release().await?,
    ///     None => println!("one of them is busy"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock_all<S: AsRef<str>>(
        &self,
        names: &[S],
    ) -> Result<Option<MultiGuard<C>>, LockError> {
        let guards = self.engine.grant_all(names, false).await?;
        Ok(guards.map(MultiGuard::of))
    }
}

/// Several locks held together ([`Locks::lock_all`]): one owner token, one fencing token
/// per name, one lease renewed as one. Its loss is any name's loss: [`lost`](Self::lost)
/// fires when the first name's lease is known lost, and [`valid_until`](Self::valid_until)
/// is the earliest name's. Dropped without [`release`](Self::release), every name is
/// released in the background.
///
/// ```no_run
/// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
/// let both = locks.lock_all(&["a", "b"]).await?;
/// tokio::select! {
///     () = both.lost() => eprintln!("lost one of them: stop"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => both.release().await?,
/// }
/// # Ok(())
/// # }
/// ```
pub struct MultiGuard<C = ConnectionManager>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    guards: Vec<LockGuard<C>>,
}

impl<C> MultiGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn of(guards: Vec<crate::exec::guard::Guard<crate::exec::node::Node<C>>>) -> Self {
        Self {
            guards: guards.into_iter().map(LockGuard::from_grant).collect(),
        }
    }

    /// The names, in the order they were taken (by Cluster slot, then by name).
    ///
    /// ```no_run
    /// # fn f(both: lockscript::MultiGuard) { println!("{:?}", both.names()); }
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.held().names()
    }

    /// The names' leases, as one.
    fn held(&self) -> Held<'_, impl Iterator<Item = &crate::Lease> + Clone> {
        Held(self.guards.iter().map(|g| &***g))
    }

    /// The fencing token of `name`, strictly larger than every earlier grant's of that
    /// name (by a multi-lock or a single lock alike); `None` if `name` is not one of them.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::MultiGuard) { println!("{:?}", both.fencing_token("a")); }
    /// ```
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.held().fencing_token(name)
    }

    /// Each name's lease, as a single lock's ([`LockGuard`]), in order.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::MultiGuard) { for g in both.guards() { println!("{}", g.name()) } }
    /// ```
    pub fn guards(&self) -> &[LockGuard<C>] {
        &self.guards
    }

    /// Resolves when any name's lease is known lost (see
    /// [`Lease::lost`](crate::Lease::lost)): by the earliest validity end at the latest,
    /// if no renewal was confirmed by then.
    ///
    /// ```no_run
    /// # async fn f(both: lockscript::MultiGuard) { both.lost().await; }
    /// ```
    pub async fn lost(&self) {
        let each = self.guards.iter().map(|g| Box::pin(g.lost()));
        futures_util::future::select_all(each).await;
    }

    /// Whether any name's lease is known lost.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::MultiGuard) { assert!(!both.is_lost()); }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.held().is_lost()
    }

    /// Whether any name's lease is suspect: a renewal is overdue (see
    /// [`Lease::is_suspect`](crate::Lease::is_suspect)).
    ///
    /// ```no_run
    /// # fn f(both: lockscript::MultiGuard) { if both.is_suspect() { eprintln!("pause writes") } }
    /// ```
    pub fn is_suspect(&self) -> bool {
        self.held().is_suspect()
    }

    /// The end of the earliest name's validity on this process's clock.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::MultiGuard) { println!("{:?}", both.valid_until()); }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.held().valid_until()
    }

    /// How long the earliest name's validity has left.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::MultiGuard) { println!("{:?}", both.remaining()); }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Asks the server whether every name still holds this guard's token.
    ///
    /// ```no_run
    /// # async fn f(both: lockscript::MultiGuard) -> Result<(), lockscript::LockError> {
    /// assert!(both.is_held().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_held(&self) -> Result<bool, LockError> {
        let each = self.guards.iter().map(|g| g.is_held());
        let held = futures_util::future::join_all(each).await;
        held.into_iter().try_fold(true, |all, one| Ok(all && one?))
    }

    /// Sets every name's lease to `ttl` from now (together); the first error if any
    /// name's failed ([`LockError::NotHeld`] for a lost one).
    ///
    /// ```no_run
    /// # async fn f(both: lockscript::MultiGuard) -> Result<(), lockscript::LockError> {
    /// both.extend(std::time::Duration::from_secs(30)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let each = self.guards.iter().map(|g| g.extend(ttl));
        futures_util::future::join_all(each)
            .await
            .into_iter()
            .collect()
    }

    /// Releases every name (together); the first error if any name's release failed
    /// ([`LockError::NotHeld`] for a lease that had been lost). Every name is released
    /// whatever the others answer.
    ///
    /// ```no_run
    /// # async fn f(both: lockscript::MultiGuard) -> Result<(), lockscript::LockError> {
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        let each = self.guards.into_iter().map(LockGuard::release);
        futures_util::future::join_all(each)
            .await
            .into_iter()
            .collect()
    }

    /// The names' guards, to release one by one.
    ///
    /// ```no_run
    /// # async fn f(both: lockscript::MultiGuard) -> Result<(), lockscript::LockError> {
    /// for guard in both.into_guards() { guard.release().await?; }
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_guards(self) -> Vec<LockGuard<C>> {
        self.guards
    }
}

impl<C> fmt::Debug for MultiGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}
