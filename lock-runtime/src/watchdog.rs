//! The lease of a held lock, and the watchdog that keeps it.
//!
//! One watchdog task per `Locks` handle (shared by its clones) watches every lease the
//! handle grants, from a queue ordered by each lease's next action: granting or
//! releasing a lock only inserts into or removes from that queue, with no task spawned
//! and no task woken. With the watchdog on, a lease is renewed through renew.lua every
//! ttl/3 (sooner after a failed renewal), each renewal in a short task of its own. The
//! loss signal fires when renew.lua answers that the key is no longer ours, or when the
//! lease's validity passes on this process's monotonic clock without a successful
//! renewal. Validity is counted from *before* each command was sent, minus a drift
//! allowance, so this process believes in its lease for no longer than the server keeps
//! it.
//!
//! Release and drop take the lease out of the queue before compare-del is sent, and
//! wait for a renewal that is already in flight: no renewal is ever sent after a
//! release.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::settings::{Keys, Settings, millis, validity};
use crate::{LockError, builtin};

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
    /// When the watchdog renews next.
    next_renewal: Instant,
}

/// Whether and until when the watchdog renews a lease.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Renew the lease while the guard lives.
    renew: bool,
    /// Stop renewing at this instant (the `max_hold` cap).
    renew_until: Option<Instant>,
}

impl Plan {
    fn renews_at(&self, now: Instant) -> bool {
        self.renew && self.renew_until.is_none_or(|until| now < until)
    }
}

fn renew_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// How soon to retry a failed renewal: the lease is still valid, and each retry is
/// bounded by the connection's response timeout.
pub(crate) fn retry_delay(ttl: Duration) -> Duration {
    (renew_interval(ttl) / 4).min(Duration::from_millis(500))
}

/// What a guard, the watchdog and [`Lease`] handles share.
pub(crate) struct LeaseState {
    pub(crate) keys: Keys,
    pub(crate) fence: u64,
    token: String,
    plan: Plan,
    times: Mutex<Times>,
    lost: watch::Sender<bool>,
    stopping: AtomicBool,
    /// A renewal has committed to sending (see [`LeaseState::stop`]).
    renewing: AtomicBool,
    renewal_done: Notify,
    /// Its place in the watchdog's queue, if queued.
    slot: Mutex<Option<(Instant, u64)>>,
    id: u64,
}

impl LeaseState {
    /// The lease of a grant whose command was sent at `sent`: `settings` give its
    /// length and hold cap, `watchdog` whether it is renewed.
    pub(crate) fn new(
        keys: Keys,
        fence: u64,
        token: &str,
        settings: &Settings,
        sent: Instant,
        watchdog: bool,
    ) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        let ttl = settings.ttl;
        let plan = Plan {
            renew: watchdog,
            renew_until: settings.max_hold.map(|cap| sent + cap),
        };
        Self {
            keys,
            fence,
            token: token.to_owned(),
            plan,
            times: Mutex::new(Times {
                valid_until: sent + validity(ttl),
                sent,
                ttl,
                next_renewal: sent + renew_interval(ttl),
            }),
            lost: watch::Sender::new(false),
            stopping: AtomicBool::new(false),
            renewing: AtomicBool::new(false),
            renewal_done: Notify::new(),
            slot: Mutex::new(None),
            id: IDS.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn times_mut(&self) -> MutexGuard<'_, Times> {
        self.times.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn times(&self) -> Times {
        *self.times_mut()
    }

    /// Records a successful renewal or extension sent at `sent` for `ttl`.
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        let mut times = self.times_mut();
        if sent >= times.sent {
            *times = Times {
                valid_until: sent + validity(ttl),
                sent,
                ttl,
                next_renewal: sent + renew_interval(ttl),
            };
        }
    }

    /// Fires the loss signal (once); the watchdog stops renewing.
    pub(crate) fn mark_lost(&self, why: &str) {
        if !self.lost.send_replace(true) {
            tracing::warn!(lock = %self.keys.name, fence = self.fence, reason = why, "lock lost");
        }
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

    /// Stops renewals. Returns `true` if one may be in flight: then the caller waits
    /// for it ([`renewal_finished`](Self::renewal_finished)) before compare-del.
    ///
    /// A renewal raises `renewing` and then reads `stopping`; this raises `stopping`
    /// and then reads `renewing` (all sequentially consistent), so at least one side
    /// sees the other: either the renewal is not sent, or the caller waits for it.
    pub(crate) fn stop(&self) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        self.renewing.load(Ordering::SeqCst)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The renewal's side of [`stop`](Self::stop): `false` means do not send.
    pub(crate) fn begin_renewal(&self) -> bool {
        self.renewing.store(true, Ordering::SeqCst);
        if self.stopping() {
            self.end_renewal();
            return false;
        }
        true
    }

    pub(crate) fn end_renewal(&self) {
        self.renewing.store(false, Ordering::SeqCst);
        self.renewal_done.notify_waiters();
    }

    /// Waits until no renewal is in flight.
    pub(crate) async fn renewal_finished(&self) {
        loop {
            let done = self.renewal_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if !self.renewing.load(Ordering::SeqCst) {
                return;
            }
            done.await;
        }
    }

    /// A renewal failed: try again at `at`.
    pub(crate) fn retry_renewal_at(&self, at: Instant) {
        self.times_mut().next_renewal = at;
    }

    /// The lease length renewals ask for.
    pub(crate) fn ttl(&self) -> Duration {
        self.times().ttl
    }

    /// Whether the lease's validity has passed.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        now >= self.times().valid_until
    }

    /// Whether a renewal is due (and allowed) at `now`.
    pub(crate) fn renewal_due(&self, now: Instant) -> bool {
        self.plan.renews_at(now) && now >= self.times().next_renewal
    }

    /// How long the lease can still be relied on.
    pub(crate) fn remaining(&self) -> Duration {
        self.times()
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// When the watchdog should next look at this lease.
    pub(crate) fn next_action(&self) -> Instant {
        let times = self.times();
        if self.plan.renews_at(Instant::now()) {
            times.next_renewal.min(times.valid_until)
        } else {
            times.valid_until
        }
    }
}

/// The watchdog's deadline queue, and when its task will next look at it.
#[derive(Default)]
struct Queue {
    leases: BTreeMap<(Instant, u64), Arc<LeaseState>>,
    /// When the task looks at the queue next, at the latest; `None` while it sleeps until
    /// woken. A lease due later than this needs no wake-up. The time stays armed after its
    /// lease leaves the queue (one idle wake-up later), so back-to-back grants, each
    /// released before the task runs and each due a third of a TTL away, cost one task
    /// wake-up per third of a TTL instead of one each.
    armed: Option<Instant>,
}

/// Watches the leases of one `Locks` handle.
pub(crate) struct Watchdog<C> {
    conn: C,
    queue: Mutex<Queue>,
    /// Wakes the task when a lease needs it sooner, and when the watchdog is dropped.
    wake: Arc<Notify>,
    started: AtomicBool,
}

impl<C> Drop for Watchdog<C> {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

impl<C> Watchdog<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(conn: C) -> Self {
        Self {
            conn,
            queue: Mutex::new(Queue::default()),
            wake: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts watching `lease` (and the watchdog task, on first use).
    pub(crate) fn watch(self: &Arc<Self>, lease: &Arc<LeaseState>) {
        if !self.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(run(Arc::downgrade(self), Arc::clone(&self.wake)));
        }
        self.schedule(lease);
    }

    /// (Re)queues `lease` at its next action.
    pub(crate) fn schedule(&self, lease: &Arc<LeaseState>) {
        let at = lease.next_action();
        let sooner = {
            let mut queue = self.queue();
            // Checked under the queue's lock: a release forgets the lease under it too,
            // after stopping it, so a stopped lease is never queued again.
            if lease.stopping() || lease.is_lost() {
                return;
            }
            let mut slot = lease.slot.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(old) = slot.take() {
                queue.leases.remove(&old);
            }
            *slot = Some((at, lease.id));
            queue.leases.insert((at, lease.id), Arc::clone(lease));
            let sooner = queue.armed.is_none_or(|armed| at < armed);
            if sooner {
                queue.armed = Some(at);
            }
            sooner
        };
        if sooner {
            self.wake.notify_one();
        }
    }

    /// Stops watching `lease`.
    pub(crate) fn forget(&self, lease: &LeaseState) {
        let mut queue = self.queue();
        if let Some(old) = lease
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            queue.leases.remove(&old);
        }
    }

    /// Takes the leases whose time has come; returns them and the time the task sleeps
    /// until next: the first lease's, or the armed time if sooner and still ahead.
    fn due(&self, now: Instant) -> (Vec<Arc<LeaseState>>, Option<Instant>) {
        let mut queue = self.queue();
        let mut due = Vec::new();
        let first = loop {
            let Some(entry) = queue.leases.first_entry() else {
                break None;
            };
            if entry.key().0 > now {
                break Some(entry.key().0);
            }
            let lease = entry.remove();
            *lease.slot.lock().unwrap_or_else(PoisonError::into_inner) = None;
            due.push(lease);
        };
        let armed = queue.armed.filter(|&armed| armed > now);
        let next = first.into_iter().chain(armed).min();
        queue.armed = next;
        (due, next)
    }

    fn act(self: &Arc<Self>, lease: Arc<LeaseState>) {
        if lease.stopping() || lease.is_lost() {
            return;
        }
        let now = Instant::now();
        let times = lease.times();
        if now >= times.valid_until {
            lease.mark_lost("the lease ran out before it could be renewed");
        } else if lease.plan.renews_at(now) && now >= times.next_renewal {
            tokio::spawn(renew(Arc::clone(self), lease, self.conn.clone()));
        } else {
            self.schedule(&lease);
        }
    }
}

/// One renewal of one lease, then its next place in the queue.
async fn renew<C>(dog: Arc<Watchdog<C>>, lease: Arc<LeaseState>, mut conn: C)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    if !lease.begin_renewal() {
        return;
    }
    let ttl = lease.times().ttl;
    let sent = Instant::now();
    let reply = builtin::renew(&lease.keys.lock, &lease.token, millis(ttl))
        .invoke_async(&mut conn)
        .await;
    lease.end_renewal();
    match reply {
        Ok(1) => {
            lease.renewed(sent, ttl);
            tracing::trace!(lock = %lease.keys.name, fence = lease.fence, "lease renewed");
        }
        Ok(_) => {
            lease.mark_lost("the key changed owner or vanished");
            return;
        }
        Err(e) => {
            let retry = retry_delay(ttl);
            lease.retry_renewal_at(Instant::now() + retry);
            tracing::warn!(lock = %lease.keys.name, error = %e, retry_in = ?retry, "lease renewal failed");
        }
    }
    dog.schedule(&lease);
}

/// The watchdog task: acts on leases as their times come, until the watchdog is gone.
async fn run<C>(dog: Weak<Watchdog<C>>, wake: Arc<Notify>)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    loop {
        let next = {
            let Some(dog) = dog.upgrade() else {
                return;
            };
            let (due, next) = dog.due(Instant::now());
            for lease in due {
                dog.act(lease);
            }
            next
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
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

/// The accessors shared by [`crate::LockGuard`] and [`crate::RedlockGuard`]; each has
/// `state: Arc<LeaseState>`, `waited: Duration` and `attempts: u32`. `$ty` is the
/// guard's path for the doc examples.
macro_rules! lease_accessors {
    ($ty:literal) => {
        /// The lock's name.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(guard: ", $ty, ") { println!(\"{}\", guard.name()); }")]
        /// ```
        pub fn name(&self) -> &str {
            &self.state.keys.name
        }

        /// This grant's fencing token: strictly larger than every earlier grant's of the
        /// same lock name. Pass it with every write the lock protects, and have the store
        /// refuse a token lower than one it has seen.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(guard: ", $ty, ") { println!(\"{}\", guard.fencing_token()); }")]
        /// ```
        pub fn fencing_token(&self) -> u64 {
            self.state.fence
        }

        /// A cloneable view of this lease (name, fencing token, loss signal), e.g. to
        /// hand to another task.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(guard: ", $ty, ") { let lease = guard.lease(); }")]
        /// ```
        pub fn lease(&self) -> crate::Lease {
            crate::Lease(std::sync::Arc::clone(&self.state))
        }

        /// How long `lock()` waited for this grant.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(guard: ", $ty, ") { println!(\"{:?}\", guard.waited()); }")]
        /// ```
        pub fn waited(&self) -> std::time::Duration {
            self.waited
        }

        /// How many acquisition attempts this grant took (1 when the lock was free).
        ///
        /// ```no_run
        #[doc = concat!("# fn f(guard: ", $ty, ") { println!(\"{}\", guard.attempts()); }")]
        /// ```
        pub fn attempts(&self) -> u32 {
            self.attempts
        }

        /// How long the lease can still be relied on, by this process's clock.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(guard: ", $ty, ") { println!(\"{:?}\", guard.remaining()); }")]
        /// ```
        pub fn remaining(&self) -> std::time::Duration {
            self.state.remaining()
        }

        /// Resolves when the lease is known lost: a renewal found another owner or no
        /// key, or the lease ran out on this process's clock before it could be renewed
        /// (server down, paused, unreachable). Never resolves for a released lease.
        ///
        /// ```no_run
        #[doc = concat!("# async fn f(guard: ", $ty, ") { guard.lost().await; eprintln!(\"stop\"); }")]
        /// ```
        pub async fn lost(&self) {
            self.state.lost().await;
        }

        /// Whether the loss signal has fired (no round trip).
        ///
        /// ```no_run
        #[doc = concat!("# fn f(guard: ", $ty, ") { assert!(!guard.is_lost()); }")]
        /// ```
        pub fn is_lost(&self) -> bool {
            self.state.is_lost()
        }
    };
}
pub(crate) use lease_accessors;

/// Runs `work` under a lease: its value if it finished first, [`LockError::Lost`] if
/// the lease was lost first (then `work` is dropped). `release` runs after `work`.
pub(crate) async fn guarded<T, Fut, R, RFut>(
    lease: Lease,
    work: Fut,
    release: R,
) -> Result<T, LockError>
where
    Fut: Future<Output = T>,
    R: FnOnce() -> RFut,
    RFut: Future<Output = Result<(), LockError>>,
{
    let outcome = tokio::select! {
        biased;
        () = lease.lost() => None,
        value = work => Some(value),
    };
    match outcome {
        Some(value) => {
            if let Err(e) = release().await {
                // The work finished while the lease was still valid on our clock.
                tracing::warn!(lock = %lease.name(), error = %e, "release after with_lock failed");
            }
            Ok(value)
        }
        None => Err(LockError::Lost {
            name: lease.name().to_owned(),
        }),
    }
}
