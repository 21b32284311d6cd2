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
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedMutexGuard, oneshot};

use crate::token::Token;

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
pub(crate) struct Offer {
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

    /// Without waiting: `Pending` while the offer stands (or a releaser is still at
    /// it), `Ready(outcome)` once a releaser finished, as [`handed`](Self::handed) says.
    pub(crate) fn try_handed(&mut self) -> Poll<Option<Handed>> {
        match self.handed.try_recv() {
            Ok(handed) => Poll::Ready(Some(handed)),
            Err(oneshot::error::TryRecvError::Empty) => Poll::Pending,
            Err(oneshot::error::TryRecvError::Closed) => Poll::Ready(None),
        }
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
