//! The async watchdog: one tokio task per handle (shared by its clones) that renews the
//! leases its guards hold.
//!
//! Leases wait in a [`Schedule`] ordered by their next action. When a renewal is due,
//! every other renewal due within [`BATCH_HORIZON`] goes with it: one short task sends
//! them in one round trip (the backend's [`renew_all`](Backend::renew_all); each lease
//! hears its own answer, and a slow round trip delays no later batch), and meanwhile
//! that task watches each lease's validity end, where the loss is logged if no renewal
//! was confirmed by then. The loss itself needs no task: [`LeaseState`] evaluates it on the
//! clock. Releasing a lease stops it; a renewal already in flight may still reach the
//! server, where renew.lua changes nothing once the key is gone or another owner's, and
//! its reply is ignored.
//!
//! The watchdog also remembers the tokio runtime it first ran on, so that guards dropped
//! outside any runtime can still be released in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Instant;

use tokio::sync::Notify;

use crate::LockError;
use crate::exec::backend::Backend;
use crate::machine::lease::{BATCH_HORIZON, LeaseState, Sending};
use crate::machine::schedule::Schedule;

/// Renews the leases of one handle.
pub(crate) struct Watchdog<B> {
    backend: B,
    schedule: Mutex<Schedule<Arc<LeaseState>>>,
    /// Wakes the task when a lease is due sooner than it planned to look, and when the
    /// watchdog is dropped.
    wake: Arc<Notify>,
    started: AtomicBool,
    runtime: OnceLock<tokio::runtime::Handle>,
}

impl<B> Drop for Watchdog<B> {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

impl<B: Backend> Watchdog<B> {
    pub(crate) fn new(backend: B) -> Self {
        Self {
            backend,
            schedule: Mutex::new(Schedule::default()),
            wake: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
            runtime: OnceLock::new(),
        }
    }

    fn schedule_lock(&self) -> MutexGuard<'_, Schedule<Arc<LeaseState>>> {
        self.schedule.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `task` in the background: on the current tokio runtime, or on the one this
    /// handle first ran on. Whether it could.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) -> bool {
        let handle = match tokio::runtime::Handle::try_current() {
            Ok(current) => current,
            Err(_) => match self.runtime.get() {
                Some(handle) => handle.clone(),
                None => return false,
            },
        };
        handle.spawn(task);
        true
    }

    /// Starts watching `lease` (and the watchdog task, on first use; the caller is
    /// inside a tokio runtime).
    pub(crate) fn watch(self: &Arc<Self>, lease: &Arc<LeaseState>) {
        if !self.started.swap(true, Ordering::SeqCst)
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let _ = self.runtime.set(handle.clone());
            handle.spawn(run(Arc::downgrade(self), Arc::clone(&self.wake)));
        }
        self.schedule(lease);
    }

    /// (Re)queues `lease` at its next action, or drops it when nothing is left to do.
    pub(crate) fn schedule(&self, lease: &Arc<LeaseState>) {
        self.schedule_all(std::slice::from_ref(lease));
    }

    /// [`schedule`](Self::schedule) for many leases (a batch's), under one lock.
    fn schedule_all(&self, leases: &[Arc<LeaseState>]) {
        let now = Instant::now();
        let wake = {
            let mut schedule = self.schedule_lock();
            let mut wake = false;
            for lease in leases {
                if let Some(at) = lease.next_action(now) {
                    wake |= schedule.insert(lease.id, at, Arc::clone(lease));
                } else {
                    schedule.remove(lease.id);
                }
            }
            wake
        };
        if wake {
            self.wake.notify_one();
        }
    }

    /// Stops watching `lease`.
    pub(crate) fn forget(&self, lease: &LeaseState) {
        self.schedule_lock().remove(lease.id);
    }

    /// Leases whose time has come (and, when one starts a renewal, those due to renew
    /// soon): the renewals that are due go out together, and the other leases are
    /// queued at their next action. A lease whose renewal goes out leaves the queue
    /// until its answer: [`renew`] watches its validity end meanwhile.
    fn act(self: &Arc<Self>, due: Vec<Arc<LeaseState>>, now: Instant) {
        let mut idle = Vec::new();
        let mut begin = |leases: Vec<Arc<LeaseState>>, renewals: &mut Vec<_>| {
            for lease in leases {
                match lease.begin_renewal(now) {
                    Some(sending) => renewals.push((lease, sending)),
                    None => idle.push(lease),
                }
            }
        };
        let mut renewals = Vec::new();
        begin(due, &mut renewals);
        if !renewals.is_empty() {
            let soon = self
                .schedule_lock()
                .take_soon(now + BATCH_HORIZON, |lease| lease.renewal_due(now));
            begin(soon, &mut renewals);
        }
        self.schedule_all(&idle);
        if !renewals.is_empty() {
            tokio::spawn(renew(Arc::clone(self), renewals));
        }
    }
}

/// The renewals that are due, in one round trip where the backend can; each lease's
/// answer applied, and the lease queued at its next action, as soon as it comes: a
/// renewal that waits (on a Cluster primary in trouble) delays no other lease of the
/// round. Until its answer comes, each lease whose validity ends is seen lost then, on
/// time (the round trip is bounded by the response timeout, which may be longer than
/// what is left of a short lease).
async fn renew<B: Backend>(dog: Arc<Watchdog<B>>, renewals: Vec<(Arc<LeaseState>, Sending)>) {
    let done: Vec<AtomicBool> = renewals.iter().map(|_| AtomicBool::new(false)).collect();
    let answered = |i: usize, reply: Result<Option<Instant>, LockError>| {
        let (Some((lease, sending)), Some(flag)) = (renewals.get(i), done.get(i)) else {
            return;
        };
        if flag.swap(true, Ordering::AcqRel) {
            return;
        }
        lease.renewal_done(*sending, reply, Instant::now());
        dog.schedule_all(std::slice::from_ref(lease));
    };
    let round_trip = dog.backend.renew_all(&renewals, &answered);
    tokio::pin!(round_trip);
    // The first validity end among the leases still waiting for their answer; looked at
    // again (an `extend` may have moved it, a lost or released lease has none) when it
    // comes first.
    let waiting = |now: Instant| {
        (renewals.iter().zip(&done))
            .filter(|(_, flag)| !flag.load(Ordering::Acquire))
            .filter_map(|((lease, _), _)| lease.next_action(now))
            .min()
    };
    let mut end = (renewals.iter().zip(&done))
        .filter(|(_, flag)| !flag.load(Ordering::Acquire))
        .map(|((_, sending), _)| sending.valid_until)
        .min();
    loop {
        let Some(at) = end else {
            break round_trip.await;
        };
        tokio::select! {
            () = &mut round_trip => break,
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
        }
        // While its renewal is in flight, a held lease's next action is its validity
        // end; past it, the lease is seen lost here.
        end = waiting(Instant::now());
    }
}

/// The watchdog task: acts on leases as their times come, until the watchdog is gone.
async fn run<B: Backend>(dog: Weak<Watchdog<B>>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(dog) = dog.upgrade() else {
                return;
            };
            let now = Instant::now();
            let (due, next) = dog.schedule_lock().take_due(now);
            if !due.is_empty() {
                dog.act(due, now);
            }
            next
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
                    () = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}
