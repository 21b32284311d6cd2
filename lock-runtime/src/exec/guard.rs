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
use crate::exec::queue::{Offer, handed_over};
use crate::machine::grant::Granted;
use crate::machine::grant::{Abandoned, Pending};
use crate::machine::key::Kind;
use crate::machine::lease::{Lease, LeaseState};

/// Ownership of one grant.
pub(crate) struct Guard<B: Backend> {
    engine: Engine<B>,
    pub(crate) held: Lease,
    /// Handovers in a row that led to this grant.
    handovers: u32,
    /// The lock was released (or handed over): drop has nothing left to do.
    released: bool,
}

impl<B: Backend> Guard<B> {
    pub(crate) fn new(engine: Engine<B>, held: Lease, handovers: u32) -> Self {
        Self {
            engine,
            held,
            handovers,
            released: false,
        }
    }

    fn lease(&self) -> &LeaseState {
        &self.held.lease
    }

    /// Asks the server(s) whether the lock still holds this guard's token; a `false`
    /// fires the loss signal. Always `false` once the lease is lost.
    pub(crate) async fn is_held(&self) -> Result<bool, LockError> {
        let lease = self.lease();
        let ours = self
            .engine
            .backend
            .holds(&lease.settings, &lease.keys, &lease.token)
            .await?;
        Ok(lease.checked(ours))
    }

    /// Sets the lease to `ttl` from now if the lock is still ours.
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let lease = self.lease();
        let sending = lease.extending(ttl, Instant::now())?;
        let renewed = self
            .engine
            .backend
            .renew(&lease.settings, &lease.keys, &lease.token, ttl)
            .await;
        lease.extended(sending, renewed, Instant::now())?;
        self.engine.watchdog.schedule(&self.held.lease);
        Ok(())
    }

    /// Stops the lease, then hands the lock to a local waiter or deletes it.
    pub(crate) async fn release(mut self) -> Result<(), LockError> {
        let lost_before = self.held.lease.stop();
        self.engine.watchdog.forget(&self.held.lease);
        let offer = B::HANDOVER
            .then(|| {
                let queue = &self.engine.queue;
                queue.handover_for(&self.held.lease, lost_before, self.handovers)
            })
            .flatten();
        if let Some(offer) = offer {
            return self.hand_over(offer).await;
        }
        let lease = Arc::clone(&self.held.lease);
        let deleted = self
            .engine
            .backend
            .release(&lease.settings, &lease.keys, &lease.token)
            .await;
        // On an error the delete may or may not have happened: drop retries it.
        let (done, outcome) = lease.released(lost_before, deleted);
        self.released = done;
        outcome
    }

    /// Release by handover.lua: the lock passes to the local waiter of `offer` in the
    /// same step (see [`handed_over`]). If this future is dropped with the command in
    /// flight, the waiter's grant is released in the background.
    async fn hand_over(mut self, offer: Offer) -> Result<(), LockError> {
        let lease = Arc::clone(&self.held.lease);
        let next = offer.token.clone();
        let sent = Instant::now();
        let reply = {
            let mut pending = Pending::new(&lease.keys, &next, sent, offer.ttl, |a| {
                self.engine.release_in_background(a);
            });
            let reply = self
                .engine
                .backend
                .hand_over(&lease.settings, &lease.keys, &lease.token, &next, offer.ttl)
                .await;
            pending.disarm();
            reply
        };
        let engine = self.engine.clone();
        let release = move |a| engine.release_in_background(a);
        let (done, outcome) = handed_over(offer, &lease, sent, self.handovers, reply, release);
        self.released = done;
        outcome
    }

    /// The writer becomes a reader (fair-queue.lua's `downgrade`): the same owner token
    /// and fencing token, a fresh lease counted from the call, renewed as before; the
    /// readers first in line come in with it. [`LockError::NotHeld`] if the write lease
    /// was lost. After a transport error the write grant is released in the background
    /// (a read grant the call may have made runs out with its lease).
    pub(crate) async fn downgrade(mut self) -> Result<Guard<B>, LockError> {
        let lease = Arc::clone(&self.held.lease);
        if lease.is_lost() {
            return Err(self.not_held());
        }
        let settings = &lease.settings;
        let sent = Instant::now();
        let call = settings.downgrade_call(&lease.keys, lease.token.as_str(), settings.ttl);
        let done = self.engine.backend.check(settings, call).await?;
        lease.stop();
        self.engine.watchdog.forget(&lease);
        self.released = true;
        if !done {
            return Err(self.lost_on_release());
        }
        let downgraded = crate::machine::fair::downgraded(
            &lease,
            sent,
            self.held.lease.attempts,
            Instant::now(),
        );
        let granted = downgraded.map_err(|late| {
            self.engine.release_in_background(*late);
            self.not_held()
        })?;
        tracing::debug!(lock = %lease.keys.name, fence = lease.fence, "write lock downgraded to read");
        Ok(self.engine.guard(granted))
    }

    fn not_held(&self) -> LockError {
        self.lease().not_held()
    }

    fn lost_on_release(&self) -> LockError {
        self.lease().lost_on_release()
    }
}

/// What the engine's grants become for the async faces: guards, with their leases
/// watched.
impl<B: Backend> Engine<B> {
    /// One attempt: a guard, or `None` when another owner holds the lock.
    pub(crate) async fn try_lock(&self, name: &str) -> Result<Option<Guard<B>>, LockError> {
        self.try_grant(name, Kind::Lock).await
    }

    /// One attempt at a grant of `kind`: a guard, or `None` when it cannot be granted
    /// now (held, or others wait first).
    pub(crate) async fn try_grant(
        &self,
        name: &str,
        kind: Kind,
    ) -> Result<Option<Guard<B>>, LockError> {
        Ok(self.attempt_grant(name, kind).await?.map(|g| self.guard(g)))
    }

    /// Waits for the lock until `wait_timeout`; `watchdog` says whether the lease is
    /// renewed.
    pub(crate) async fn lock(&self, name: &str, watchdog: bool) -> Result<Guard<B>, LockError> {
        self.grant(name, Kind::Lock, watchdog).await
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
        let guard = self.lock(name, true).await?;
        let lease = guard.held.clone();
        let outcome = tokio::select! {
            biased;
            () = guard.held.lease.lost() => None,
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
        Guard::new(self.clone(), held, handovers)
    }
}

impl<B: Backend> Drop for Guard<B> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let lease = &self.held.lease;
        lease.stop();
        self.engine.watchdog.forget(lease);
        tracing::debug!(lock = %lease.keys.name, "guard dropped without release; releasing in the background");
        self.engine.release_in_background(Abandoned {
            keys: lease.keys.clone(),
            token: lease.token.clone(),
            until: lease.expires(),
            ticket: None,
        });
    }
}
