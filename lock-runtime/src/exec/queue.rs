//! The local queue: waiters of one process take turns at a lock, first come first
//! served, so a release is not raced by every local waiter at once, and a task that
//! just released cannot barge past tasks that were already waiting.
//!
//! Only the task at the head of a name's queue talks to Redis (attempts, and waits for
//! the release notification); the others wait on a fair tokio mutex. Across processes
//! each process has one contender per lock name. Entries are removed when nobody queues.
//!
//! While the head waits it stands an [`Offer`]: a guard of this process that releases
//! the same lock takes it and hands the lock over with handover.lua (release and grant
//! in one round trip) instead of deleting it and letting the head try again. After
//! [`HANDOVER_STREAK`] handovers in a row the next release is a plain one, which
//! publishes, so waiters in other processes get their turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedMutexGuard, oneshot};

use crate::LockError;
use crate::machine::grant::Abandoned;
use crate::machine::lease::LeaseState;
use crate::machine::token::Token;

/// How many times in a row a lock may be handed over within one process before a
/// release goes through compare-del.lua again. Each handover skips the release
/// notification, so without a cap a busy process could keep a lock from the waiters
/// of other processes forever; with it they get a fair race at least every ninth grant.
pub(crate) const HANDOVER_STREAK: u32 = 8;

/// One name's queue. The mutex's value says whether the last head got the lock.
type Gate = Arc<tokio::sync::Mutex<bool>>;

/// The per-name queues of one `Locks` handle and its clones.
#[derive(Default)]
pub(crate) struct LocalQueue {
    gates: Mutex<HashMap<String, Gate>>,
    /// The standing offer of each name's waiting head.
    offers: Mutex<HashMap<String, Offer>>,
    next_offer: AtomicU64,
}

/// A waiting head's readiness to be handed the lock by a local releaser.
pub struct Offer {
    id: u64,
    /// The lock key: clones of a `Locks` handle with other key prefixes share the queue.
    lock: String,
    /// The waiter's owner token and lease, for handover.lua.
    pub(crate) token: Token,
    pub(crate) ttl: Duration,
    handed: oneshot::Sender<Handed>,
}

impl Offer {
    /// Tells the waiter it holds the lock now. If the waiter has gone meanwhile (its
    /// `lock()` future was dropped), or goes before claiming it, the grant is released.
    pub(crate) fn hand(self, handed: Handed) {
        // An error gives `handed` back; dropping it releases the grant.
        let _ = self.handed.send(handed);
    }
}

/// What a releaser tells the waiter it handed the lock to. Until the waiter
/// [claims](Self::claim) it, it owns the grant: dropped unclaimed (the waiter's future was
/// dropped first), it releases the grant in the background.
pub(crate) struct Handed {
    /// The waiter's fencing token.
    pub(crate) fence: u64,
    /// When handover.lua was sent: the new lease is counted from here.
    pub(crate) sent: Instant,
    /// Handovers in a row this grant ends, counting itself.
    pub(crate) streak: u32,
    /// Releases the grant; run on drop unless claimed.
    unclaimed: Option<Box<dyn FnOnce() + Send>>,
}

impl Handed {
    /// A grant made by handover.lua, released by `release` unless claimed.
    pub(crate) fn new(
        fence: u64,
        sent: Instant,
        streak: u32,
        release: Box<dyn FnOnce() + Send>,
    ) -> Self {
        Self {
            fence,
            sent,
            streak,
            unclaimed: Some(release),
        }
    }

    /// The waiter takes the grant over: nothing is released on drop any more.
    pub(crate) fn claim(mut self) -> Self {
        self.unclaimed = None;
        self
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        if let Some(release) = self.unclaimed.take() {
            release();
        }
    }
}

/// The head's side of an [`Offer`]; dropping it withdraws the offer.
pub(crate) struct Standing {
    queue: Arc<LocalQueue>,
    name: String,
    id: u64,
    handed: oneshot::Receiver<Handed>,
}

impl Standing {
    /// Resolves when a releaser took the offer and finished: `Some` if the lock was
    /// handed over, `None` if the handover did not happen. Not to be polled again after
    /// it resolved.
    pub(crate) async fn handed(&mut self) -> Option<Handed> {
        (&mut self.handed).await.ok()
    }

    /// Removes the offer if it still stands; whether it did.
    fn withdraw(&self) -> bool {
        let mut offers = self.queue.offers();
        if offers.get(&self.name).is_some_and(|o| o.id == self.id) {
            offers.remove(&self.name);
            true
        } else {
            false
        }
    }
}

impl Drop for Standing {
    fn drop(&mut self) {
        self.withdraw();
    }
}

impl LocalQueue {
    /// Waits for this task's turn at lock `name`.
    pub(crate) async fn turn(self: &Arc<Self>, name: &str) -> Turn {
        let gate = {
            let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(gates.entry(name.to_owned()).or_default())
        };
        // Built before waiting, so a cancelled wait still tidies the map.
        let mut turn = Turn {
            queue: Arc::clone(self),
            name: name.to_owned(),
            gate: Arc::clone(&gate),
            held: None,
        };
        turn.held = Some(gate.lock_owned().await);
        turn
    }

    fn offers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Offer>> {
        self.offers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stands the offer of `name`'s waiting head (the caller must hold the turn) to be
    /// handed lock key `lock` with owner `token` and lease `ttl`.
    pub(crate) fn offer(
        self: &Arc<Self>,
        name: &str,
        lock: &str,
        token: &Token,
        ttl: Duration,
    ) -> Standing {
        let id = self.next_offer.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.offers().insert(
            name.to_owned(),
            Offer {
                id,
                lock: lock.to_owned(),
                token: token.clone(),
                ttl,
                handed: tx,
            },
        );
        Standing {
            queue: Arc::clone(self),
            name: name.to_owned(),
            id,
            handed: rx,
        }
    }

    /// Takes the offer standing for lock key `lock` of `name`, if a waiter still wants it.
    pub(crate) fn take_offer(&self, name: &str, lock: &str) -> Option<Offer> {
        let mut offers = self.offers();
        let offer = offers.get(name)?;
        if offer.lock != lock || offer.handed.is_closed() {
            return None;
        }
        offers.remove(name)
    }
}

impl LocalQueue {
    /// The offer a release of `lease` hands the lock to, if the rules let it: a lease
    /// not lost before the release, a plain lock's (a reader's, a permit's or a queued
    /// grant is no lock key of the waiter's kind), fewer than [`HANDOVER_STREAK`]
    /// handovers in a row, and a waiter of this handle standing.
    pub(crate) fn handover_for(
        &self,
        lease: &LeaseState,
        lost_before: bool,
        handovers: u32,
    ) -> Option<Offer> {
        if lost_before || lease.settings.queued(&lease.keys) || handovers >= HANDOVER_STREAK {
            return None;
        }
        self.take_offer(&lease.keys.name, &lease.keys.lock)
    }
}

/// What handover.lua's `reply` (sent at `sent`) means for the guard that released
/// `lease` to `offer` after `handovers` handovers in a row: whether the guard is done
/// (else its drop retries the release), and its caller's result. The waiter is told; a
/// grant that may exist without it (after an error that may have run the script, or a
/// waiter gone before it claimed it) goes to `release`.
pub(crate) fn handed_over(
    offer: Offer,
    lease: &LeaseState,
    sent: Instant,
    handovers: u32,
    reply: Result<Option<u64>, LockError>,
    release: impl FnOnce(Abandoned) + Send + 'static,
) -> (bool, Result<(), LockError>) {
    let abandoned = Abandoned {
        keys: lease.keys.clone(),
        token: offer.token.clone(),
        until: sent + offer.ttl,
        ticket: None,
        // Released here only when handover.lua got no answer (it may still run).
        unanswered: reply.is_err(),
    };
    match reply {
        Err(e) => {
            // The handover may have happened: the waiter's grant is released here, and
            // ours by the guard's drop (whichever holds the key).
            if e.may_have_run() {
                release(abandoned);
            }
            (false, Err(e))
        }
        // Not ours any more; nothing changed, and the waiter, told nothing, tries.
        Ok(None) => (true, Err(lease.lost_on_release())),
        Ok(Some(fence)) => {
            tracing::debug!(lock = %lease.keys.name, fence = lease.fence, "lock released by handover");
            crate::machine::metrics::handed_over(&lease.keys.name);
            let release = Box::new(move || release(abandoned));
            offer.hand(Handed::new(fence, sent, handovers + 1, release));
            // Released as any release is (its time held counted), the lease not lost before.
            lease.released(false, Ok(true))
        }
    }
}

/// The head of a lock name's local queue; dropping it lets the next task in.
pub(crate) struct Turn {
    queue: Arc<LocalQueue>,
    name: String,
    gate: Gate,
    held: Option<OwnedMutexGuard<bool>>,
}

impl Turn {
    /// Whether the previous head left because it got the lock (so the lock is most
    /// likely held right now). Reading it resets it.
    pub(crate) fn follows_a_grant(&mut self) -> bool {
        self.held
            .as_mut()
            .is_some_and(|granted| std::mem::take(&mut **granted))
    }

    /// Records that this head got the lock, for the next head.
    pub(crate) fn granted(&mut self) {
        if let Some(granted) = self.held.as_mut() {
            **granted = true;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.held = None;
        let mut gates = self
            .queue
            .gates
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // The map's reference and ours: nobody else queues for this name.
        if Arc::strong_count(&self.gate) == 2 {
            gates.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::LocalQueue;

    #[tokio::test]
    async fn turns_are_exclusive_and_the_map_is_tidied() {
        let queue = Arc::new(LocalQueue::default());
        let first = queue.turn("a").await;
        let second = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move { queue.turn("a").await })
        };
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        drop(first);
        let mut second = second.await.unwrap();
        assert!(!second.follows_a_grant());
        second.granted();
        let third = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move { queue.turn("a").await })
        };
        tokio::task::yield_now().await;
        assert_eq!(queue.gates.lock().unwrap().len(), 1);
        drop(second);
        let mut third = third.await.unwrap();
        assert!(
            third.follows_a_grant(),
            "the next head learns the lock was granted"
        );
        assert!(!third.follows_a_grant(), "and only once");
        let second = third;
        drop(second);
        assert!(queue.gates.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_cancelled_wait_tidies_the_map() {
        let queue = Arc::new(LocalQueue::default());
        let first = queue.turn("a").await;
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(5), queue.turn("a")).await;
        assert!(waiting.is_err());
        drop(first);
        assert!(queue.gates.lock().unwrap().is_empty());
    }
}
