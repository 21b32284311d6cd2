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
use crate::backend::Backend;
use crate::engine::{Engine, Granted};
use crate::grant::{Abandoned, Grant, Pending};
use crate::key::Kind;
use crate::lease::{Held, Lease, LeaseState};
use crate::limit::check_ttl;
use crate::queue::{HANDOVER_STREAK, Handed, Offer};

/// Ownership of one grant.
pub(crate) struct Guard<B: Backend> {
    engine: Engine<B>,
    pub(crate) held: Held,
    /// Handovers in a row that led to this grant.
    handovers: u32,
    /// The lock was released (or handed over): drop has nothing left to do.
    released: bool,
}

impl<B: Backend> Guard<B> {
    pub(crate) fn new(
        engine: Engine<B>,
        lease: Arc<LeaseState>,
        grant: Grant,
        started: Instant,
    ) -> Self {
        Self {
            engine,
            held: Held {
                lease,
                waited: grant.sent.saturating_duration_since(started),
                attempts: grant.attempts,
            },
            handovers: grant.handovers,
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
        check_ttl(ttl)?;
        let lease = self.lease();
        if lease.is_lost() {
            return Err(self.not_held());
        }
        let sending = lease.sending(ttl, Instant::now());
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
        // Only a plain lock's grant is handed to a plain waiter of this handle: a
        // reader's, a permit's or a queued grant is no lock key of the waiter's kind.
        if !lost_before
            && B::HANDOVER
            && !self.lease().settings.queued(&self.lease().keys)
            && self.handovers < HANDOVER_STREAK
            && let Some(offer) = self
                .engine
                .queue
                .take_offer(&self.lease().keys.name, &self.lease().keys.lock)
        {
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
    /// same step. If the waiter has gone by the time it is told, or this future is
    /// dropped with the command in flight, its grant is released in the background.
    async fn hand_over(mut self, offer: Offer) -> Result<(), LockError> {
        let lease = Arc::clone(&self.held.lease);
        let next = offer.token.clone();
        let sent = Instant::now();
        let fence = {
            let mut pending = Pending::new(&lease.keys, &next, sent, offer.ttl, |a| {
                self.engine.release_in_background(a);
            });
            let reply = self
                .engine
                .backend
                .hand_over(&lease.settings, &lease.keys, &lease.token, &next, offer.ttl)
                .await;
            // After an error the handover may have happened: the waiter's grant is
            // released by the pending marker, and ours by drop (whichever holds the key).
            let fence = pending.settle(reply)?;
            pending.disarm();
            fence
        };
        self.released = true;
        let Some(fence) = fence else {
            // Not ours any more; nothing changed, and the waiter, told nothing, tries.
            return Err(self.lost_on_release());
        };
        // From here the grant belongs to the message: it releases it unless claimed.
        let engine = self.engine.clone();
        let abandoned = Abandoned {
            keys: lease.keys.clone(),
            token: next,
            until: sent + offer.ttl,
            ticket: None,
        };
        let release = move || engine.release_in_background(abandoned);
        let streak = self.handovers + 1;
        offer.hand(Handed::new(fence, sent, streak, Box::new(release)));
        tracing::debug!(lock = %lease.keys.name, fence = lease.fence, "lock released by handover");
        Ok(())
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
        let (keys, grant) = crate::fair::downgraded(&lease, sent, self.held.attempts);
        tracing::debug!(lock = %keys.name, fence = lease.fence, "write lock downgraded to read");
        Ok(self.engine.guard(Granted {
            keys,
            token: lease.token.clone(),
            grant,
            started: sent,
            watchdog: lease.renews(),
        }))
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
        let lease = Lease(Arc::clone(&guard.held.lease));
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
        match guard.release().await {
            Ok(()) => Ok(value),
            // The lease ended before the release: the work may have overlapped another
            // holder's. That is exactly what the caller must hear.
            Err(e @ LockError::NotHeld { .. }) => Err(e),
            Err(e) => {
                // The lease was still valid; the release is retried in the background.
                tracing::warn!(lock = name, error = %e, "release after with_lock failed; retried in the background");
                Ok(value)
            }
        }
    }

    /// The guard of a grant, its lease watched.
    pub(crate) fn guard(&self, granted: Granted) -> Guard<B> {
        let Granted {
            keys,
            token,
            grant,
            started,
            watchdog,
        } = granted;
        let one_node = B::ONE_NODE && !keys.kind.shared();
        let lease = LeaseState::of_grant(keys, token, &grant, &self.settings, watchdog, one_node);
        self.watchdog.watch(&lease);
        Guard::new(self.clone(), lease, grant, started)
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

/// The methods of the async guard faces ([`crate::LockGuard`], [`crate::RedlockGuard`]):
/// each has a field `inner: Guard<_>`. `$ty` is the face's path for the doc examples.
macro_rules! async_guard_methods {
    ($ty:literal) => {
        pub(crate) fn held(&self) -> &crate::lease::Held {
            &self.inner.held
        }

        crate::lease::lease_accessors!($ty);

        /// Resolves when the lease is known lost: at its validity end at the latest (see
        /// [`valid_until`](Self::valid_until)) if no renewal was confirmed by then,
        /// whatever the server or the network is doing, or earlier when a renewal finds
        /// the key gone or another owner's (for Redlock: on a majority of masters). Never
        /// resolves for a released lease.
        ///
        /// ```no_run
        #[doc = concat!("# async fn f(guard: ", $ty, ") { guard.lost().await; eprintln!(\"stop\"); }")]
        /// ```
        pub async fn lost(&self) {
            self.held().lease.lost().await;
        }

        /// Asks the server (for Redlock: every master) whether the lock still holds this
        /// guard's token (on a majority). A `false` also fires the loss signal; after the
        /// loss signal it is always `false`. Returns within the response timeout (node
        /// timeout).
        ///
        /// ```no_run
        #[doc = concat!("# async fn f(guard: ", $ty, ") -> Result<(), lockscript::LockError> {")]
        /// if !guard.is_held().await? { eprintln!("lost"); }
        /// # Ok(())
        /// # }
        /// ```
        pub async fn is_held(&self) -> Result<bool, crate::LockError> {
            self.inner.is_held().await
        }

        /// Sets the lease to `ttl` from now, if the lock is still ours (for Redlock: on a
        /// majority, within the validity); the watchdog then renews with this length.
        /// [`LockError::NotHeld`](crate::LockError::NotHeld) (and nothing changed) if it
        /// is not, or if the lease was already lost.
        ///
        /// ```no_run
        #[doc = concat!("# async fn f(guard: ", $ty, ") -> Result<(), lockscript::LockError> {")]
        /// guard.extend(std::time::Duration::from_secs(60)).await?;
        /// # Ok(())
        /// # }
        /// ```
        pub async fn extend(&self, ttl: std::time::Duration) -> Result<(), crate::LockError> {
            self.inner.extend(ttl).await
        }
    };
}
pub(crate) use async_guard_methods;
