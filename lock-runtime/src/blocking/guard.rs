//! The blocking guard: the same rules as the async one (see `guard.rs`), on the sync
//! connection; its lease is renewed by the handle's background thread.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Shared;
use crate::LockError;
use crate::grant::{Abandoned, Grant};
use crate::lease::{Held, LeaseState};
use crate::limit::check_ttl;

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
    held: Held,
    released: bool,
}

impl<C> LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    pub(crate) fn new(
        shared: Arc<Shared<C>>,
        lease: Arc<LeaseState>,
        grant: Grant,
        started: Instant,
    ) -> Self {
        Self {
            shared,
            held: Held {
                lease,
                waited: grant.sent.saturating_duration_since(started),
                attempts: grant.attempts,
            },
            released: false,
        }
    }

    pub(crate) fn held(&self) -> &Held {
        &self.held
    }

    crate::lease::lease_accessors!("lockscript::blocking::LockGuard");

    /// Blocks until the lease is known lost, or `timeout` passes; returns whether it
    /// was lost. It returns at the lease's validity end at the latest if no renewal was
    /// confirmed by then, whatever the server is doing.
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::LockGuard) {
    /// if guard.lost_within(std::time::Duration::from_secs(1)) { eprintln!("stop"); }
    /// # }
    /// ```
    pub fn lost_within(&self, timeout: Duration) -> bool {
        self.held.lease.lost_within(timeout)
    }

    /// Asks the server whether the lock still holds this guard's token; see
    /// [`crate::LockGuard::is_held`].
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::LockGuard) -> Result<(), lockscript::LockError> {
    /// if !guard.is_held()? { eprintln!("lost"); }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_held(&self) -> Result<bool, LockError> {
        let lease = &self.held.lease;
        let token = lease.token.as_str();
        let ours = self
            .shared
            .conn
            .with(Some(lease.settings.response_timeout), |c| {
                if let Some(call) = lease.settings.holds_call(&lease.keys, token) {
                    return Ok(call.invoke(c)?.0);
                }
                let value: Option<String> = redis::cmd("GET").arg(&lease.keys.lock).query(c)?;
                Ok(value.as_deref() == Some(token))
            })?;
        Ok(lease.checked(ours))
    }

    /// Sets the lease to `ttl` from now if the lock is still ours; see
    /// [`crate::LockGuard::extend`].
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::LockGuard) -> Result<(), lockscript::LockError> {
    /// guard.extend(std::time::Duration::from_secs(60))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        check_ttl(ttl)?;
        let lease = &self.held.lease;
        if lease.is_lost() {
            return Err(lease.not_held());
        }
        let sending = lease.sending(ttl, Instant::now());
        let renewed = self
            .shared
            .conn
            .with(Some(lease.settings.response_timeout), |c| {
                let sent = Instant::now();
                let renewed = lease
                    .settings
                    .renew_call(&lease.keys, lease.token.as_str(), ttl)
                    .invoke(c)?;
                Ok(renewed.0.then_some(sent))
            });
        lease.extended(sending, renewed, Instant::now())?;
        if let Some(Some(worker)) = self.shared.worker.get() {
            worker.watch(lease);
        }
        Ok(())
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
        let lease = Arc::clone(&self.held.lease);
        let lost_before = lease.stop();
        if let Some(Some(worker)) = self.shared.worker.get() {
            worker.forget(&lease);
        }
        let deleted = self
            .shared
            .conn
            .with(Some(lease.settings.response_timeout), |c| {
                lease
                    .settings
                    .release_call(&lease.keys, lease.token.as_str())
                    .invoke(c)
            })
            .map(|released| released.0);
        let (done, outcome) = lease.released(lost_before, deleted);
        self.released = done;
        outcome
    }
}

impl<C> LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// The writer becomes a reader; see the async guard's `downgrade`.
    pub(crate) fn downgrade(mut self) -> Result<LockGuard<C>, LockError> {
        let lease = Arc::clone(&self.held.lease);
        if lease.is_lost() {
            return Err(lease.not_held());
        }
        let settings = &lease.settings;
        let sent = Instant::now();
        let done = self
            .shared
            .conn
            .with(Some(settings.response_timeout), |c| {
                settings
                    .downgrade_call(&lease.keys, lease.token.as_str(), settings.ttl)
                    .invoke(c)
            })?
            .0;
        lease.stop();
        if let Some(Some(worker)) = self.shared.worker.get() {
            worker.forget(&lease);
        }
        self.released = true;
        if !done {
            return Err(lease.lost_on_release());
        }
        let (keys, grant) = crate::fair::downgraded(&lease, sent, self.held.attempts);
        let renews = lease.renews();
        let read = LeaseState::of_grant(keys, lease.token.clone(), &grant, settings, renews, false);
        if renews && let Some(worker) = self.shared.worker() {
            worker.watch(&read);
        }
        Ok(LockGuard::new(Arc::clone(&self.shared), read, grant, sent))
    }
}

impl<C> Drop for LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let lease = &self.held.lease;
        lease.stop();
        if let Some(Some(worker)) = self.shared.worker.get() {
            worker.forget(lease);
        }
        tracing::debug!(lock = %lease.keys.name, "guard dropped without release; releasing in the background");
        self.shared.release_in_background(
            Abandoned {
                keys: lease.keys.clone(),
                token: lease.token.clone(),
                until: lease.expires(),
                ticket: None,
            },
            &lease.settings,
        );
    }
}

impl<C> fmt::Debug for LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.held.lease.debug(f, "blocking::LockGuard")
    }
}
