//! What a guard owns, written once for both executors' guards: the lease, the handovers
//! in a row that led to it, and whether anything is left to release; and what each way
//! of giving it up (release, handover, downgrade, drop) means for it. The executors send
//! the calls and tell the watchdog; the outcomes are decided here (and in
//! [`LeaseState::released`], [`handed_over`], [`crate::machine::fair::downgraded`]).

use std::sync::Arc;
use std::time::Instant;

use crate::LockError;
use crate::exec::queue::{LocalQueue, Offer, handed_over};
use crate::machine::grant::{Abandoned, Granted};
use crate::machine::lease::{Lease, LeaseState};
use crate::machine::metrics::End;

/// The ownership of one grant, as a guard holds it.
pub(crate) struct Owned {
    pub(crate) held: Lease,
    /// Handovers in a row that led to this grant.
    handovers: u32,
    /// The lock was released, handed over or downgraded: drop has nothing left to do.
    released: bool,
}

impl Owned {
    pub(crate) fn new(held: Lease, handovers: u32) -> Self {
        Self {
            held,
            handovers,
            released: false,
        }
    }

    pub(crate) fn lease(&self) -> &Arc<LeaseState> {
        &self.held.lease
    }

    /// A copy that goes on alone from here, its lease forked (the model checker's
    /// branches; see [`LeaseState::fork`]).
    #[cfg(feature = "model")]
    pub(crate) fn fork(&self) -> Self {
        Self {
            held: Lease {
                lease: Arc::new(self.lease().fork()),
            },
            ..*self
        }
    }

    /// Begins a release at `now`: stops the lease (no renewal is sent after it); whether
    /// it was lost before, and the waiter of `queue` (the handle's, when its releases can
    /// hand over) to hand the lock to, if the rules let it.
    pub(crate) fn give_up(
        &self,
        queue: Option<&LocalQueue>,
        now: Instant,
    ) -> (bool, Option<Offer>) {
        let lost_before = self.lease().stop(now);
        let offer = queue.and_then(|q| q.handover_for(self.lease(), lost_before, self.handovers));
        (lost_before, offer)
    }

    /// The release's delete answered `deleted`: the caller's result. On an error the
    /// delete may or may not have happened, and drop retries it.
    pub(crate) fn deleted(
        &mut self,
        lost_before: bool,
        deleted: Result<bool, LockError>,
    ) -> Result<(), LockError> {
        let (done, outcome) = self.lease().released(lost_before, deleted);
        self.released = done;
        outcome
    }

    /// handover.lua, sent at `sent` for `offer`, answered `reply`: the caller's result
    /// (see [`handed_over`]; a grant the waiter may not claim goes to `release`).
    pub(crate) fn handed_over(
        &mut self,
        offer: Offer,
        sent: Instant,
        reply: Result<Option<u64>, LockError>,
        release: impl FnOnce(Abandoned) + Send + 'static,
    ) -> Result<(), LockError> {
        let (done, outcome) =
            handed_over(offer, self.lease(), sent, self.handovers, reply, release);
        self.released = done;
        outcome
    }

    /// Before a downgrade is sent: stops the write lease, as a release does (no renewal
    /// goes after it: one that reached the server after the downgrade would find the
    /// write key gone and report a lease lost that the downgrade ended), or
    /// [`LockError::NotHeld`] if it is lost already.
    pub(crate) fn downgrading(&self) -> Result<(), LockError> {
        if self.lease().stop(Instant::now()) {
            return Err(self.lease().not_held());
        }
        Ok(())
    }

    /// The downgrade sent at `sent` answered `reply`: the write lease ends there,
    /// downgraded, when it was done (whatever a renewal's refusal said meanwhile), and
    /// gives the read grant; else the caller's error (the loss when the server said
    /// the write lock was not ours, or a renewal's refusal that no answer disproves). A
    /// read grant answered after its validity goes to `release`; after an error that
    /// may have left the write grant, the guard's drop releases it.
    pub(crate) fn downgraded(
        &mut self,
        sent: Instant,
        reply: Result<bool, LockError>,
        release: impl FnOnce(Abandoned),
    ) -> Result<Granted, LockError> {
        let lease = Arc::clone(self.lease());
        match reply {
            Err(e) => {
                let (_, outcome) = lease.released(false, Err(e));
                return outcome.and_then(|()| Err(lease.not_held()));
            }
            Ok(false) => {
                self.released = true;
                return Err(lease.lost_on_release());
            }
            Ok(true) => self.released = true,
        }
        lease.settle(End::Downgraded);
        let downgraded =
            crate::machine::fair::downgraded(&lease, sent, lease.attempts, Instant::now());
        let granted = downgraded.map_err(|late| {
            release(*late);
            lease.not_held()
        })?;
        tracing::debug!(lock = %lease.keys.name, fence = lease.fence, "write lock downgraded to read");
        Ok(granted)
    }

    /// The guard is dropped at `now`: when it was not given up, its lease stops at once and
    /// the grant is to be released in the background with its own token.
    pub(crate) fn abandoned(&self, now: Instant) -> Option<Abandoned> {
        if self.released {
            return None;
        }
        let lease = self.lease();
        lease.stop(now);
        tracing::debug!(lock = %lease.keys.name, "guard dropped without release; releasing in the background");
        Some(Abandoned {
            keys: lease.keys.clone(),
            token: lease.token.clone(),
            until: lease.expires(),
            ticket: None,
            unanswered: false,
        })
    }
}
