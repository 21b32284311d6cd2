//! The async guard, written once for every async face: [`crate::LockGuard`] and
//! [`crate::RedlockGuard`] are thin wrappers around [`Guard`].
//!
//! - `release` stops the lease (no renewal is sent after it; one already in flight
//!   changes nothing once the key is gone), then deletes the lock if it is still ours,
//!   or hands it to a waiting task of the same handle; it reports `NotHeld` when the
//!   lease had been lost, whatever the delete found.
//! - A guard dropped without release stops its lease at once and is released in the
//!   background with its own token; its TTL frees it in every case.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::LockError;
use crate::exec::backend::Backend;
use crate::exec::engine::Engine;
use crate::exec::owned::Owned;
use crate::exec::queue::Offer;
use crate::machine::grant::{Granted, Pending};
use crate::machine::key::Kind;
use crate::machine::lease::{Lease, LeaseState};

/// Ownership of one grant.
pub(crate) struct Guard<B: Backend> {
    engine: Engine<B>,
    pub(crate) owned: Owned,
}

impl<B: Backend> Guard<B> {
    fn lease(&self) -> &LeaseState {
        self.owned.lease()
    }

    /// Asks the server(s) whether the lock still holds this guard's token; a `false`
    /// fires the loss signal. Always `false` once the lease is lost.
    pub(crate) async fn is_held(&self) -> Result<bool, LockError> {
        let lease = self.lease();
        let ours = self.engine.backend.holds(lease.owner()).await?;
        Ok(lease.checked(ours))
    }

    /// Sets the lease to `ttl` from now if the lock is still ours.
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let lease = self.lease();
        let sending = lease.extending(ttl, Instant::now())?;
        let renewed = self.engine.backend.renew(lease.owner(), ttl).await;
        let extended = lease.extended(sending, renewed, Instant::now());
        // Whatever the answer: an extend for less than what was left moved the lease's
        // renewals earlier, answered or not.
        self.engine.watchdog.schedule(self.owned.lease());
        extended
    }

    /// Stops the lease, then hands the lock to a local waiter or deletes it.
    pub(crate) async fn release(mut self) -> Result<(), LockError> {
        let queue = B::HANDOVER.then_some(&*self.engine.queue);
        let (lost_before, offer) = self.owned.give_up(queue, Instant::now());
        self.engine.watchdog.forget(self.owned.lease());
        if let Some(offer) = offer {
            return self.hand_over(offer).await;
        }
        let lease = Arc::clone(self.owned.lease());
        let deleted = (self.engine.backend).release(lease.owner()).await;
        self.owned.deleted(lost_before, deleted)
    }

    /// Release by handover.lua: the lock passes to the local waiter of `offer` in the
    /// same step (see [`Owned::handed_over`]). If this future is dropped with the command
    /// in flight, the waiter's grant is released in the background.
    async fn hand_over(mut self, offer: Offer) -> Result<(), LockError> {
        let lease = Arc::clone(self.owned.lease());
        let sent = Instant::now();
        let reply = {
            let mut pending = Pending::new(&lease.keys, &offer.token, sent, offer.ttl, |a| {
                self.engine.release_in_background(a);
            });
            let reply = self.engine.backend.hand_over(lease.owner(), &offer).await;
            pending.disarm();
            reply
        };
        let engine = self.engine.clone();
        let release = move |a| engine.release_in_background(a);
        self.owned.handed_over(offer, sent, reply, release)
    }

    /// The writer becomes a reader (fair-queue.lua's `downgrade`): the same owner token
    /// and fencing token, a fresh lease counted from the call, renewed as before; the
    /// readers first in line come in with it. [`LockError::NotHeld`] if the write lease
    /// was lost. After a transport error the write grant is released in the background
    /// (a read grant the call may have made runs out with its lease).
    pub(crate) async fn downgrade(mut self) -> Result<Guard<B>, LockError> {
        self.owned.downgrading()?;
        let lease = Arc::clone(self.owned.lease());
        let settings = &lease.settings;
        let sent = Instant::now();
        let call = settings.downgrade_call(&lease.keys, lease.token.as_str(), settings.ttl);
        let done = self.engine.backend.check(settings, call).await;
        let engine = &self.engine;
        let downgraded = (self.owned).downgraded(sent, done, |a| engine.release_in_background(a));
        engine.watchdog.forget(&lease);
        Ok(engine.guard(downgraded?))
    }
}

/// What the engine's grants become for the async faces: guards, with their leases
/// watched.
impl<B: Backend> Engine<B> {
    /// One attempt at a grant of `kind`: a guard, or `None` when it cannot be granted
    /// now (held, or others wait first).
    pub(crate) async fn try_grant(
        &self,
        name: &str,
        kind: Kind,
    ) -> Result<Option<Guard<B>>, LockError> {
        Ok(self.attempt_grant(name, kind).await?.map(|g| self.guard(g)))
    }

    /// Waits for a grant of `kind` until `wait_timeout`; `watchdog` says whether the
    /// lease is renewed.
    pub(crate) async fn grant(
        &self,
        name: &str,
        kind: Kind,
        watchdog: bool,
    ) -> Result<Guard<B>, LockError> {
        Ok(self.guard(self.wait_grant(name, kind, watchdog).await?))
    }

    /// Runs `work` while holding the lock (watchdog on); see [`crate::Locks::with_lock`].
    pub(crate) async fn with_lock<T, F, Fut>(&self, name: &str, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.grant(name, Kind::Lock, true).await?;
        let lease = guard.owned.held.clone();
        let outcome = tokio::select! {
            biased;
            () = guard.owned.lease().lost() => None,
            value = work(lease) => Some(value),
        };
        let Some(value) = outcome else {
            return Err(LockError::Lost {
                name: name.to_owned(),
            });
        };
        crate::machine::lease::after_work(name, guard.release().await, value)
    }

    /// The guard of a grant, its lease watched.
    pub(crate) fn guard(&self, granted: Granted) -> Guard<B> {
        let (held, handovers) = Lease::of(granted, &self.settings, B::ONE_NODE);
        self.watchdog.watch(&held.lease);
        let owned = Owned::new(held, handovers);
        Guard {
            engine: self.clone(),
            owned,
        }
    }
}

impl<B: Backend> Drop for Guard<B> {
    fn drop(&mut self) {
        if let Some(abandoned) = self.owned.abandoned(Instant::now()) {
            self.engine.watchdog.forget(self.owned.lease());
            self.engine.release_in_background(abandoned);
        }
    }
}
