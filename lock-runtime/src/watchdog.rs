//! The lease of a held lock, and the task that watches it.
//!
//! Every guard has one monitor task. With the watchdog on, it renews the lease through
//! renew.lua every ttl/3 (sooner after a failed renewal); with it off, or once the hold
//! cap is reached, it only waits. Either way it fires the loss signal when renew.lua
//! answers that the key is no longer ours, or when the lease's validity passes on this
//! process's monotonic clock without a successful renewal. Validity is counted from
//! *before* each command was sent, minus a drift allowance, so this process believes
//! in its lease for no longer than the server keeps it.
//!
//! Release and drop stop the task before compare-del is sent: an idle task is aborted
//! on the spot, and one with a renewal in flight is waited for. No renewal is ever
//! sent after a release.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::builtin;
use crate::settings::{Keys, millis, validity};

/// The times that describe a lease; changed by renewals and `extend`.
#[derive(Clone, Copy, Debug)]
struct Times {
    /// Until when this process may rely on the lease.
    valid_until: Instant,
    /// When the command that set `valid_until` was sent; a renewal sent earlier that
    /// completes later does not overwrite a newer one.
    sent: Instant,
    /// The lease length renewals ask for.
    ttl: Duration,
}

/// What a guard, its monitor task and its [`Lease`] handles share.
pub(crate) struct LeaseState {
    pub(crate) keys: Keys,
    pub(crate) fence: u64,
    times: Mutex<Times>,
    lost: watch::Sender<bool>,
    stopping: AtomicBool,
    /// The monitor has committed to sending a renewal (see [`LeaseState::stop`]).
    renewing: AtomicBool,
    wake: Notify,
}

impl LeaseState {
    pub(crate) fn new(keys: Keys, fence: u64, sent: Instant, ttl: Duration) -> Self {
        Self {
            keys,
            fence,
            times: Mutex::new(Times {
                valid_until: sent + validity(ttl),
                sent,
                ttl,
            }),
            lost: watch::Sender::new(false),
            stopping: AtomicBool::new(false),
            renewing: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    fn times(&self) -> Times {
        *self.times.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a successful renewal or extension sent at `sent` for `ttl`.
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        {
            let mut times = self.times.lock().unwrap_or_else(PoisonError::into_inner);
            if sent >= times.sent {
                *times = Times {
                    valid_until: sent + validity(ttl),
                    sent,
                    ttl,
                };
            }
        }
        self.wake.notify_one();
    }

    /// Fires the loss signal (once) and stops renewing.
    pub(crate) fn mark_lost(&self, why: &str) {
        if !self.lost.send_replace(true) {
            tracing::warn!(lock = %self.keys.name, fence = self.fence, reason = why, "lock lost");
        }
        self.wake.notify_one();
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves once the lease is known lost; never, if it is released first.
    pub(crate) async fn lost(&self) {
        let mut rx = self.lost.subscribe();
        if rx.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Stops the monitor task. Returns `true` if a renewal may be in flight, and the
    /// caller must wait for the task to finish before compare-del; `false` if the task
    /// will never send another command and can simply be aborted.
    ///
    /// The monitor raises `renewing` and then reads `stopping`; this raises `stopping`
    /// and then reads `renewing` (all sequentially consistent), so at least one side
    /// sees the other: either the monitor returns without sending, or we wait.
    pub(crate) fn stop(&self) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.notify_one();
        self.renewing.load(Ordering::SeqCst)
    }

    /// The monitor's side of [`stop`](Self::stop): `false` means do not send.
    fn begin_renewal(&self) -> bool {
        self.renewing.store(true, Ordering::SeqCst);
        if self.stopping() {
            self.renewing.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    fn end_renewal(&self) {
        self.renewing.store(false, Ordering::SeqCst);
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// How long the lease can still be relied on.
    pub(crate) fn remaining(&self) -> Duration {
        self.times()
            .valid_until
            .saturating_duration_since(Instant::now())
    }
}

/// A cheap, cloneable view of a held lease: its name, fencing token and loss signal.
/// It cannot release or extend; the guard does that.
///
/// ```no_run
/// # async fn demo(locks: lock_runtime::Locks) -> Result<(), lock_runtime::LockError> {
/// let done = locks
///     .with_lock("orders:42", |lease| async move {
///         println!("writing with fencing token {}", lease.fencing_token());
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Lease(pub(crate) Arc<LeaseState>);

impl Lease {
    /// The lock's name.
    ///
    /// ```no_run
    /// # fn f(lease: lock_runtime::Lease) { println!("{}", lease.name()); }
    /// ```
    pub fn name(&self) -> &str {
        &self.0.keys.name
    }

    /// The fencing token of this grant: strictly larger than every earlier grant's.
    ///
    /// ```no_run
    /// # fn f(lease: lock_runtime::Lease) { println!("{}", lease.fencing_token()); }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.0.fence
    }

    /// Resolves when the lease is known lost (see [`LockGuard::lost`](crate::LockGuard::lost)).
    ///
    /// ```no_run
    /// # async fn f(lease: lock_runtime::Lease) { lease.lost().await; eprintln!("lost"); }
    /// ```
    pub async fn lost(&self) {
        self.0.lost().await;
    }

    /// Whether the loss signal has fired.
    ///
    /// ```no_run
    /// # fn f(lease: lock_runtime::Lease) { assert!(!lease.is_lost()); }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.0.is_lost()
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.0.keys.name)
            .field("fencing_token", &self.0.fence)
            .field("lost", &self.0.is_lost())
            .finish_non_exhaustive()
    }
}

/// How the monitor of one guard behaves.
pub(crate) struct Plan {
    /// Renew the lease while the guard lives.
    pub(crate) renew: bool,
    /// Stop renewing at this instant (the `max_hold` cap).
    pub(crate) renew_until: Option<Instant>,
}

fn renew_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// Watches one lease until it is released, dropped or lost.
pub(crate) async fn monitor<C>(state: Arc<LeaseState>, mut conn: C, token: String, plan: Plan)
where
    C: redis::aio::ConnectionLike + Send,
{
    let mut next_renewal = Instant::now() + renew_interval(state.times().ttl);
    loop {
        if state.stopping() || state.is_lost() {
            return;
        }
        let times = state.times();
        let now = Instant::now();
        let renewing = plan.renew && plan.renew_until.is_none_or(|until| now < until);
        let wake_at = if renewing {
            next_renewal.min(times.valid_until)
        } else {
            times.valid_until
        };
        tokio::select! {
            () = state.wake.notified() => {
                // Stopped, extended or lost: look again. An extension moves the next
                // renewal to a third of the new lease.
                let times = state.times();
                next_renewal = next_renewal.max(times.sent + renew_interval(times.ttl));
                continue;
            }
            () = tokio::time::sleep_until(wake_at) => {}
        }
        if state.stopping() {
            return;
        }
        if Instant::now() >= state.times().valid_until {
            state.mark_lost("the lease ran out before it could be renewed");
            return;
        }
        if !renewing {
            continue;
        }
        if !state.begin_renewal() {
            return;
        }
        let ttl = state.times().ttl;
        let sent = Instant::now();
        let reply = builtin::renew(&state.keys.lock, &token, millis(ttl))
            .invoke_async(&mut conn)
            .await;
        state.end_renewal();
        match reply {
            Ok(1) => {
                state.renewed(sent, ttl);
                next_renewal = sent + renew_interval(ttl);
                tracing::trace!(lock = %state.keys.name, fence = state.fence, "lease renewed");
            }
            Ok(_) => {
                state.mark_lost("the key changed owner or vanished");
                return;
            }
            Err(e) => {
                // Retry soon: the lease is still valid, and each retry is bounded by
                // the connection's response timeout.
                let retry = (renew_interval(ttl) / 4).min(Duration::from_millis(500));
                next_renewal = Instant::now() + retry;
                tracing::warn!(lock = %state.keys.name, error = %e, retry_in = ?retry, "lease renewal failed");
            }
        }
    }
}
