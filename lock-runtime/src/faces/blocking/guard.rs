//! The blocking guard: the same rules as the async one (see `guard.rs`), on the sync
//! connection; its lease is renewed by the handle's background thread.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::LockError;
use crate::exec::blocking::Shared;
use crate::exec::owned::Owned;
use crate::exec::queue::Offer;
use crate::machine::grant::Granted;
use crate::machine::lease::{Lease, LeaseState};
use crate::machine::settings::Settings;

/// Ownership of one lock acquired through [`super::Locks`].
///
/// Dropping it without [`release`](Self::release) stops its renewals and releases the
/// lock from the handle's background thread; the lease's TTL frees it in every case.
/// Its `Debug` never shows the owner token.
///
/// ```no_run
/// # fn f(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
/// let guard = locks.lock("orders:42")?;
/// if !guard.is_lost() { /* write with guard.fencing_token() */ }
/// guard.release()?;
/// # Ok(())
/// # }
/// ```
pub struct LockGuard<C = redis::Connection>
where
    C: redis::ConnectionLike + Send + 'static,
{
    shared: Arc<Shared<C>>,
    pub(crate) owned: Owned,
}

impl<C> LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// The guard of `granted`, its lease watched by the handle's thread when renewed.
    pub(crate) fn of(shared: &Arc<Shared<C>>, granted: Granted, settings: &Arc<Settings>) -> Self {
        let (held, handovers) = Lease::of(granted, settings, true);
        if held.lease.renews()
            && let Some(worker) = shared.worker()
        {
            worker.watch(&held.lease);
        }
        Self {
            shared: Arc::clone(shared),
            owned: Owned::new(held, handovers),
        }
    }

    /// A cloneable view of this lease (name, fencing token, loss signal), e.g. to hand
    /// to another thread. The guard derefs to the same [`Lease`](crate::Lease), whose
    /// [`lost_within`](crate::Lease::lost_within) blocks until the lease is lost.
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::LockGuard) { let lease = guard.lease(); }
    /// ```
    pub fn lease(&self) -> crate::Lease {
        self.owned.held.clone()
    }

    /// Asks the server whether the lock still holds this guard's token; see
    /// [`crate::LeaseGuard::is_held`].
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::LockGuard) -> Result<(), lockscript::LockError> {
    /// if !guard.is_held()? { eprintln!("lost"); }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_held(&self) -> Result<bool, LockError> {
        let lease = self.owned.lease();
        let ours = (self.shared.conn).holds(lease.owner())?;
        Ok(lease.checked(ours))
    }

    /// Sets the lease to `ttl` from now if the lock is still ours; see
    /// [`crate::LeaseGuard::extend`].
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::LockGuard) -> Result<(), lockscript::LockError> {
    /// guard.extend(std::time::Duration::from_secs(60))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let lease = self.owned.lease();
        let sending = lease.extending(ttl, Instant::now())?;
        let renewed = (self.shared.conn).renew(lease.owner(), ttl);
        let extended = lease.extended(sending, renewed, Instant::now());
        // Whatever the answer: an extend for less than what was left moved the lease's
        // renewals earlier, answered or not.
        self.shared.watch(lease);
        extended
    }

    /// Stops renewals, then deletes the lock if it still holds this guard's token; see
    /// [`crate::LockGuard::release`].
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::LockGuard) -> Result<(), lockscript::LockError> {
    /// guard.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(mut self) -> Result<(), LockError> {
        let (lost_before, offer) = self.owned.give_up(Some(&self.shared.queue), Instant::now());
        let lease = Arc::clone(self.owned.lease());
        self.shared.forget(&lease);
        if let Some(offer) = offer {
            return self.hand_over(&lease, offer);
        }
        let deleted = (self.shared.conn).release(lease.owner());
        self.owned.deleted(lost_before, deleted)
    }
}

impl<C> LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// Release by handover.lua: the lock passes to the waiting thread of `offer` in the
    /// same round trip (see [`Owned::handed_over`]).
    fn hand_over(mut self, lease: &LeaseState, offer: Offer) -> Result<(), LockError> {
        let sent = Instant::now();
        let reply = (self.shared.conn).hand_over(lease.owner(), &offer);
        let (shared, settings) = (Arc::clone(&self.shared), Arc::clone(&lease.settings));
        let release = move |a| shared.release_in_background(a, &settings);
        self.owned.handed_over(offer, sent, reply, release)
    }

    /// The writer becomes a reader; see the async guard's `downgrade`.
    pub(crate) fn downgrade(mut self) -> Result<LockGuard<C>, LockError> {
        self.owned.downgrading()?;
        let lease = Arc::clone(self.owned.lease());
        let settings = &lease.settings;
        let sent = Instant::now();
        let call = settings.downgrade_call(&lease.keys, lease.token.as_str(), settings.ttl);
        let done = self.shared.conn.check(settings, &call);
        let shared = &self.shared;
        let release = |a| shared.release_in_background(a, settings);
        let downgraded = self.owned.downgraded(sent, done, release);
        shared.forget(&lease);
        Ok(LockGuard::of(shared, downgraded?, settings))
    }
}

impl<C> Drop for LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn drop(&mut self) {
        if let Some(abandoned) = self.owned.abandoned(Instant::now()) {
            let lease = self.owned.lease();
            self.shared.forget(lease);
            self.shared
                .release_in_background(abandoned, &lease.settings);
        }
    }
}

/// A guard is its lease: `guard.fencing_token()`, `guard.lost_within(t)`,
/// `guard.is_lost()` and the other methods of [`Lease`](crate::Lease).
impl<C> std::ops::Deref for LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.owned.held
    }
}

impl<C> fmt::Debug for LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.owned.lease().debug(f, "blocking::LockGuard")
    }
}
