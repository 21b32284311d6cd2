//! The blocking face's background thread: one per handle (shared by its clones and
//! guards), started with the first grant, that renews the leases of held locks and
//! releases grants nobody owns. No thread is started per lock.
//!
//! It runs the same [`Schedule`] as the async watchdog. Its commands go through the
//! handle's connection, one round trip at a time, each bounded by the response timeout:
//! the renewals that are due together, with the background releases due by then; a
//! release goes on its own only when its round trip ends before the next renewal is due
//! ([`releases_at`]), so no release delays a renewal. It also asks the server what it
//! offers besides scripts when a lease call finds that question open, in the time left
//! before its next renewal is due ([`Conn::ask`]), so the question never delays one.
//! The loss of a lease does not depend on this thread at all ([`LeaseState`] evaluates
//! it on the clock).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::conn::Conn;
use crate::machine::grant::Abandoned;
use crate::machine::lease::{BATCH_HORIZON, LeaseState, Sending};
use crate::machine::native::Question;
use crate::machine::schedule::{Schedule, releases_at};
use crate::machine::settings::Settings;

/// Something the thread does at a given time.
enum Job {
    /// Renew the lease if due; watch its validity end.
    Lease(Arc<LeaseState>),
    /// Release a grant nobody owns, with its handle's settings (their delivery), after
    /// `failures` failed tries.
    Release(Abandoned, Arc<Settings>, u32),
    /// Ask the server what it offers, bounded by at most this response timeout.
    Ask(Question, Duration),
}

/// Release jobs take ids from here; leases use their own (below 2^63).
static RELEASE_IDS: AtomicU64 = AtomicU64::new(1 << 63);
/// The question's job (one out at a time).
const ASK_ID: u64 = u64::MAX;
/// The least time before the next renewal worth a question: one given less would
/// time out on most networks, and count as offering nothing. With less, it waits for
/// the time after that renewal.
const QUESTION_ROOM: Duration = Duration::from_millis(10);

struct State {
    schedule: Schedule<Job>,
    /// Release jobs queued: the thread finishes them even after the handle is gone.
    releases: usize,
    /// The handle is gone.
    closed: bool,
}

/// What the handle and the thread share.
pub(crate) struct Worker {
    state: Mutex<State>,
    wake: Condvar,
}

impl Worker {
    /// Starts the thread for `conn`. `None` if the OS refuses a thread: leases are then
    /// not renewed (their loss is still signalled on time) and abandoned grants are
    /// freed by their TTL.
    pub(crate) fn start<C>(conn: Arc<Conn<C>>) -> Option<Arc<Self>>
    where
        C: redis::ConnectionLike + Send + 'static,
    {
        let worker = Arc::new(Self {
            state: Mutex::new(State {
                schedule: Schedule::default(),
                releases: 0,
                closed: false,
            }),
            wake: Condvar::new(),
        });
        let thread = {
            let worker = Arc::clone(&worker);
            std::thread::Builder::new()
                .name("lockscript-watchdog".to_owned())
                .spawn(move || worker.run(&conn))
        };
        match thread {
            Ok(_) => Some(worker),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the watchdog thread; leases are not renewed");
                None
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn queue(&self, id: u64, at: Instant, job: Job) {
        let wake = self.state().schedule.insert(id, at, job);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Watches `lease` from now on (renewals, and its validity end).
    pub(crate) fn watch(&self, lease: &Arc<LeaseState>) {
        if let Some(at) = lease.next_action(Instant::now()) {
            self.queue(lease.id, at, Job::Lease(Arc::clone(lease)));
        }
    }

    /// Stops watching `lease`.
    pub(crate) fn forget(&self, lease: &LeaseState) {
        self.state().schedule.remove(lease.id);
    }

    /// Releases `abandoned` as soon as possible, retrying until its TTL ends.
    pub(crate) fn release(&self, abandoned: Abandoned, settings: Arc<Settings>) {
        self.state().releases += 1;
        let id = RELEASE_IDS.fetch_add(1, Ordering::Relaxed);
        self.queue(id, Instant::now(), Job::Release(abandoned, settings, 0));
    }

    /// Asks the server what it offers (`question`, claimed by a lease call) as soon as a
    /// turn on the connection cannot delay a renewal.
    pub(crate) fn ask(&self, question: Question, timeout: Duration) {
        self.queue(ASK_ID, Instant::now(), Job::Ask(question, timeout));
    }

    /// The handle is gone: the thread ends once no release is left to do.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.wake.notify_one();
    }

    fn run<C: redis::ConnectionLike + Send + 'static>(&self, conn: &Conn<C>) {
        let mut state = self.state();
        loop {
            if state.closed && state.releases == 0 {
                return;
            }
            let now = Instant::now();
            let (mut due, next) = state.schedule.take_due(now);
            // Renewals due soon go in the same round trip as those due now.
            if due.iter().any(|job| matches!(job, Job::Lease(_))) {
                let lease = |job: &Job| matches!(job, Job::Lease(l) if l.renewal_due(now));
                due.extend(state.schedule.take_soon(now + BATCH_HORIZON, lease));
            }
            if due.is_empty() {
                state = match next {
                    Some(at) => {
                        self.wake
                            .wait_timeout(state, at.saturating_duration_since(now))
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                    None => self
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner),
                };
                continue;
            }
            drop(state);
            self.act(conn, due);
            state = self.state();
        }
    }

    /// Does the jobs that are due in one round trip: every renewal, with the releases;
    /// releases alone only if they cannot delay the next renewal (else they wait for it).
    /// Then the question, if one is due ([`ask_before_renewal`](Self::ask_before_renewal)).
    fn act<C: redis::ConnectionLike + Send + 'static>(&self, conn: &Conn<C>, due: Vec<Job>) {
        let now = Instant::now();
        let mut renewals = Vec::new();
        let mut releases = Vec::new();
        let mut question = None;
        for job in due {
            match job {
                Job::Lease(lease) => match lease.begin_renewal(now) {
                    Some(sending) => renewals.push((lease, sending)),
                    None => self.watch(&lease),
                },
                Job::Release(abandoned, settings, failures) => {
                    releases.push((abandoned, settings, failures));
                }
                Job::Ask(asked, timeout) => question = Some((asked, timeout)),
            }
        }
        self.renew_and_release(conn, now, renewals, releases);
        if let Some((question, timeout)) = question {
            self.ask_before_renewal(conn, question, timeout);
        }
    }

    /// Asks the question in the time left before the next renewal is due, bounded by
    /// that time (at most `timeout`), so a server or a Cluster primary that stalls
    /// costs no renewal; with too little time left, after that renewal.
    fn ask_before_renewal<C: redis::ConnectionLike + Send + 'static>(
        &self,
        conn: &Conn<C>,
        question: Question,
        timeout: Duration,
    ) {
        let now = Instant::now();
        let next_lease = (self.state().schedule).first_at(|job| matches!(job, Job::Lease(_)));
        let left = next_lease.map_or(timeout, |at| at.saturating_duration_since(now));
        match next_lease {
            Some(at) if left < QUESTION_ROOM => {
                self.queue(ASK_ID, at, Job::Ask(question, timeout));
            }
            _ => conn.ask(question, left.min(timeout)),
        }
    }

    /// The renewals and releases of [`act`](Self::act), due at `now`.
    fn renew_and_release<C: redis::ConnectionLike + Send + 'static>(
        &self,
        conn: &Conn<C>,
        now: Instant,
        renewals: Vec<(Arc<LeaseState>, Sending)>,
        mut releases: Vec<(Abandoned, Arc<Settings>, u32)>,
    ) {
        let bound = releases.iter().map(|(_, s, _)| s.response_timeout).max();
        if let Some(bound) = bound {
            let next_lease = (self.state().schedule).first_at(|job| matches!(job, Job::Lease(_)));
            if let Some(at) = releases_at(now, bound, !renewals.is_empty(), next_lease) {
                for (abandoned, settings, failures) in releases.drain(..) {
                    let id = RELEASE_IDS.fetch_add(1, Ordering::Relaxed);
                    self.queue(id, at, Job::Release(abandoned, settings, failures));
                }
            }
        }
        if renewals.is_empty() && releases.is_empty() {
            return;
        }
        let calls: Vec<_> = (releases.iter())
            .map(|(abandoned, settings, _)| (&**settings, abandoned))
            .collect();
        let sent = Instant::now();
        let (renewed, deleted) = conn.renew_all(&renewals, &calls);
        drop(calls);
        let now = Instant::now();
        for ((lease, sending), reply) in renewals.into_iter().zip(renewed) {
            lease.renewal_done(sending, reply, now);
            self.watch(&lease);
        }
        for ((abandoned, settings, failures), reply) in releases.into_iter().zip(deleted) {
            let again = abandoned.released(reply.as_ref().copied(), failures, sent, now);
            if let Some(at) = again {
                let id = RELEASE_IDS.fetch_add(1, Ordering::Relaxed);
                self.queue(id, at, Job::Release(abandoned, settings, failures + 1));
            } else {
                self.state().releases -= 1;
            }
        }
    }
}
