//! The local queue: waiters of one process take turns at a lock, first come first
//! served, so a release is not raced by every local waiter at once, and a task that
//! just released cannot barge past tasks that were already waiting.
//!
//! Only the task at the head of a name's queue talks to Redis (attempts, and waits for
//! the release notification); the others wait on a fair tokio mutex. Across processes
//! each process has one contender per lock name. Entries are removed when nobody queues.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// One name's queue. The mutex's value says whether the last head got the lock.
type Gate = Arc<tokio::sync::Mutex<bool>>;

/// The per-name queues of one `Locks` handle and its clones.
#[derive(Default)]
pub(crate) struct LocalQueue {
    gates: Mutex<HashMap<String, Gate>>,
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
