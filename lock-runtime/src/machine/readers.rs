//! The read guards a handle's tasks (threads) hold: a write lock asked for by the task
//! that holds the read lock of the same name would wait for itself, and is refused with
//! [`LockError::Upgrade`] instead. Shared by the async and blocking faces.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::LockError;

/// Who took a read guard: the task, or outside a task the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Taker {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Taker {
    pub(crate) fn current() -> Self {
        tokio::task::try_id()
            .map_or_else(|| Taker::Thread(std::thread::current().id()), Taker::Task)
    }
}

/// The read guards a handle's tasks hold, by name and taker: a write lock asked for by
/// a taker that holds the read lock of the name would wait for itself.
#[derive(Debug, Default)]
pub(crate) struct Readers(Mutex<HashMap<(String, Taker), usize>>);

impl Readers {
    /// [`LockError::Upgrade`] if the current task (thread) holds `name` for reading.
    pub(crate) fn refuse_upgrade(&self, name: &str) -> Result<(), LockError> {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains_key(&(name.to_owned(), Taker::current())) {
            return Err(LockError::Upgrade {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// Notes a read guard of `name` taken by the current task (thread).
    pub(crate) fn mark(self: &Arc<Self>, name: &str) -> ReadMark {
        let key = (name.to_owned(), Taker::current());
        *self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default() += 1;
        ReadMark {
            readers: Arc::clone(self),
            key,
        }
    }
}

/// One read guard's entry in [`Readers`], removed on drop.
#[derive(Debug)]
pub(crate) struct ReadMark {
    readers: Arc<Readers>,
    key: (String, Taker),
}

impl Drop for ReadMark {
    fn drop(&mut self) {
        let mut held = self
            .readers
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}
