//! The lease of a held lock: its validity clock, its renewal plan and its loss signal.
//!
//! One type for every face (async, blocking, Redlock). It does no I/O: the watchdogs
//! ask it when to renew and tell it what the server answered, guards tell it when they
//! stop, and everyone asks it whether the lease still holds.
//!
//! **The loss rule is evaluated on the clock, not delivered by a task.** A lease is
//! lost once its validity end passes without a confirmed renewal, or once the server
//! answered that the key is gone or has another owner. [`LeaseState::is_lost`] and
//! [`LeaseState::status`] compare the monotonic clock with the validity end on every
//! call, and [`LeaseState::lost`] sleeps until exactly that end (re-arming when a
//! renewal moves it), so no command in flight, reconnect or stalled watchdog can delay
//! the signal. A renewal whose reply arrives after the validity end is refused: a lost
//! lease never comes back.
//!
//! Validity is counted from *before* the granting or renewing command was sent, minus
//! a drift allowance (see [`crate::machine::limit::validity`]), so this process believes in
//! its lease for no longer than the server keeps it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::LockError;
use crate::machine::grant::Granted;
use crate::machine::key::Keys;
use crate::machine::limit::validity;
use crate::machine::metrics::End;
use crate::machine::settings::Settings;
use crate::machine::token::Token;

/// How often the watchdog renews: three times per lease, so two renewals in a row may
/// fail before the lease runs out.
pub(crate) fn renew_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// How soon a failed renewal is retried: four tries per renewal interval, at most every
/// half second (each try is bounded by the response timeout).
pub(crate) fn retry_delay(ttl: Duration) -> Duration {
    (renew_interval(ttl) / 4).min(Duration::from_millis(500))
}

/// How far ahead of its due time the watchdog looks for renewals to send with one that
/// is due: the renewals of one node due within this horizon go in one round trip.
pub(crate) const BATCH_HORIZON: Duration = Duration::from_millis(50);

/// How early a lease of `ttl` may be renewed to go with others: a tenth of its renewal
/// interval, at most [`BATCH_HORIZON`]. Renewing early only moves its validity end
/// earlier than a renewal on time would, by at most that much.
pub(crate) fn renew_early(ttl: Duration) -> Duration {
    (renew_interval(ttl) / 10).min(BATCH_HORIZON)
}

/// What a lease is, as of one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Valid until the given instant, unless renewed.
    Held { valid_until: Instant },
    /// Known lost: it ran out, or the server said it is not ours.
    Lost,
    /// Released (or dropped) before it was lost: nothing more happens to it.
    Released,
}

/// The mutable part of a lease.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "model", derive(Hash))]
struct Times {
    /// Until when this process may rely on the lease.
    valid_until: Instant,
    /// When the command that set `valid_until` was sent: an older renewal that completes
    /// later does not overwrite a newer one.
    sent: Instant,
    /// The lease length renewals ask for (`extend` changes it).
    ttl: Duration,
    /// When the watchdog renews next.
    next_renewal: Instant,
    /// A renewal has been sent and not answered yet.
    renewing: bool,
    /// The watchdog's last renewal failed (an error or no reply, not a refusal) while
    /// the lease was valid, and none was confirmed since.
    suspect: bool,
    /// Why the lease was lost, once it is.
    lost: Option<&'static str>,
    /// Whether the guard has given the lease up, and what the server said of it since.
    ending: Ending,
    /// Threads blocked in [`LeaseState::lost_within`]. `changed_sync` is signalled only
    /// while there are some: a condvar signal is a futex syscall even with nobody waiting,
    /// and every release would pay it.
    sync_waiters: u32,
    /// Renewals and extensions sent and not answered yet.
    flying: Vec<Flight>,
    /// The shortest ttl among commands that were in flight at the same time as another
    /// one still in flight: the server may have run them in either order. Cleared once
    /// none is in flight.
    overlap: Option<Duration>,
    /// The shortest ttl among commands that got no answer (a timeout, a reset): they
    /// may still run on the server, after any later command.
    unsure: Option<Duration>,
    /// The latest instant the server may keep the key, over every command sent for it:
    /// a dropped guard's background release keeps trying until then.
    farthest: Instant,
    /// Ids for [`Sending`].
    next_id: u64,
}

impl Times {
    /// Whether a renewal may go at `now`: none in flight, and it is due or due within
    /// [`renew_early`] of `now` (to go with others).
    fn renewal_may_go(&self, now: Instant) -> bool {
        let due = self.next_renewal.checked_sub(renew_early(self.ttl));
        !self.renewing && due.is_none_or(|d| d <= now)
    }
}

/// Where a lease is in being given up by its guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "model", derive(Hash))]
enum Ending {
    /// The guard holds it.
    Held,
    /// The guard released or dropped it, and no release has found the key ours yet.
    /// `refusal`: a refusal that came meanwhile. A renewal marked in flight before the
    /// stop may have reached the server after the release, so it counts only if the
    /// release does not find the key ours (see [`LeaseState::released`]).
    Stopped { refusal: Option<&'static str> },
    /// The release (a delete, a handover, a downgrade) found the key ours when it ran:
    /// the lease was held until then, and nothing the server says afterwards makes it
    /// lost.
    Settled,
}

/// A renewal or extension in flight: its id and the ttl it sets.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "model", derive(Hash))]
struct Flight {
    id: u64,
    ttl: Duration,
}

/// Why a lease is lost when no renewal was confirmed before its validity end.
const RAN_OUT: &str = "the lease ran out before a renewal was confirmed";

/// A renewal or extension the lease knows is on its way to the server (see
/// [`LeaseState::sending`]); its answer goes back to the lease with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "model", derive(Hash))]
pub struct Sending {
    id: u64,
    /// The lease length the command sets.
    pub(crate) ttl: Duration,
    /// When it was sent.
    at: Instant,
    /// The lease's validity end when it was sent (a later command may have moved it).
    pub(crate) valid_until: Instant,
}

/// A held lease, shared by its guard, the watchdog and [`Lease`] views.
pub struct LeaseState {
    pub(crate) keys: Keys,
    pub(crate) fence: u64,
    pub(crate) token: Token,
    /// The settings of the handle that granted it (response timeout, node timeout).
    pub(crate) settings: Arc<Settings>,
    /// Renew while held (the watchdog setting at grant time).
    renews: bool,
    /// Stop renewing at this instant (the `max_hold` cap).
    renew_until: Option<Instant>,
    /// A number that orders leases with equal deadlines in a schedule.
    pub(crate) id: u64,
    /// The grant lives on one server (not a Redlock quorum): a guarded script can check it.
    pub(crate) one_node: bool,
    /// How long the caller's call waited for the grant.
    pub(crate) waited: Duration,
    /// The caller's acquisition attempts.
    pub(crate) attempts: u32,
    /// When the granting command was sent (how long it was held, for the metrics).
    since: Instant,
    times: Mutex<Times>,
    /// Wakes async waiters ([`lost`](Self::lost)) when the lease changes.
    changed: Notify,
    /// Wakes blocking waiters ([`lost_within`](Self::lost_within)).
    changed_sync: Condvar,
}

impl LeaseState {
    /// The lease of a grant whose command was sent at `sent`; the watchdog renews it if
    /// `renews`.
    pub(crate) fn new(
        keys: Keys,
        fence: u64,
        token: Token,
        settings: Arc<Settings>,
        sent: Instant,
        renews: bool,
    ) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        let ttl = settings.ttl;
        Self {
            keys,
            fence,
            token,
            renews,
            renew_until: settings.max_hold.and_then(|cap| sent.checked_add(cap)),
            settings,
            id: IDS.fetch_add(1, Ordering::Relaxed),
            one_node: true,
            waited: Duration::ZERO,
            attempts: 1,
            since: sent,
            times: Mutex::new(Times {
                valid_until: sent + validity(ttl),
                sent,
                ttl,
                next_renewal: sent + renew_interval(ttl),
                renewing: false,
                suspect: false,
                lost: None,
                ending: Ending::Held,
                sync_waiters: 0,
                flying: Vec::new(),
                overlap: None,
                unsure: None,
                farthest: sent + ttl,
                next_id: 0,
            }),
            changed: Notify::new(),
            changed_sync: Condvar::new(),
        }
    }

    /// The lease of `grant`, shared by its guard and the watchdog.
    pub(crate) fn of_grant(
        keys: Keys,
        token: Token,
        grant: &crate::machine::grant::Grant,
        settings: &Arc<Settings>,
        renews: bool,
        one_node: bool,
        waited: Duration,
    ) -> Arc<Self> {
        let mut lease = Self::new(
            keys,
            grant.fence,
            token,
            Arc::clone(settings),
            grant.sent,
            renews,
        );
        lease.one_node = one_node;
        lease.waited = waited;
        lease.attempts = grant.attempts;
        if let Some(granted) = grant.lease {
            // A shorter first lease (a fair handoff's claim): valid for that long, and
            // renewed to the full ttl a third of the way through it.
            let times = lease
                .times
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            times.valid_until = grant.sent + validity(granted);
            times.next_renewal = grant.sent + renew_interval(granted);
            times.farthest = times.farthest.max(grant.sent + granted);
        }
        Arc::new(lease)
    }

    fn times(&self) -> MutexGuard<'_, Times> {
        self.times.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease at `now`. A lease whose validity end has passed is marked lost here, by
    /// whoever looks first.
    pub(crate) fn status(&self, now: Instant) -> Status {
        let mut times = self.times();
        self.status_locked(&mut times, now)
    }

    fn status_locked(&self, times: &mut Times, now: Instant) -> Status {
        if times.lost.is_some() {
            Status::Lost
        } else if times.ending != Ending::Held {
            Status::Released
        } else if now >= times.valid_until && !crate::machine::mutants::no_deadline() {
            self.lose(times, RAN_OUT);
            Status::Lost
        } else {
            Status::Held {
                valid_until: times.valid_until,
            }
        }
    }

    /// Marks the lease lost (once), logs why, and wakes everyone waiting for it.
    fn lose(&self, times: &mut Times, why: &'static str) {
        if times.lost.is_none() {
            times.lost = Some(why);
            tracing::warn!(lock = %self.keys.name, fence = self.fence, reason = why, "lock lost");
            // A lease that ran out was held until its validity end, however late that is
            // seen (the blocking watchdog sees it after a round trip that outlasted it).
            let end = if why == RAN_OUT {
                times.valid_until
            } else {
                Instant::now()
            };
            let held = end.saturating_duration_since(self.since);
            let lost = End::Lost {
                expired: why == RAN_OUT,
            };
            crate::machine::metrics::ended(&self.keys.name, held, lost);
        }
        self.signal(times.sync_waiters > 0);
    }

    /// Whether the lease is lost now (or was). A released lease is lost only if the
    /// server said so (see [`stop`](Self::stop)), never by running out.
    pub(crate) fn is_lost(&self) -> bool {
        self.status(Instant::now()) == Status::Lost
    }

    /// The server answered that the key is gone or has another owner: the lease is lost.
    /// Once it is stopped, that waits for the release's answer: a renewal marked in flight
    /// before the stop may have reached the server after the release (it waited for the
    /// connection, or went on another one), so its refusal proves a loss only if the
    /// release does not find the key ours either (see [`released`](Self::released)).
    pub(crate) fn refused(&self, why: &'static str) {
        let mut times = self.times();
        match times.ending {
            Ending::Held => self.lose(&mut times, why),
            Ending::Stopped { .. } if crate::machine::mutants::refusal_after_stop_loses() => {
                self.lose(&mut times, why);
            }
            Ending::Stopped { refusal: None } => {
                times.ending = Ending::Stopped { refusal: Some(why) };
            }
            Ending::Stopped { refusal: Some(_) } | Ending::Settled => {}
        }
    }

    /// Stops the lease for good (release or drop) at `now`: no more renewals, and its
    /// validity end no longer makes it lost; only the server's word can (the release
    /// finding the key gone, or failing after a renewal was refused; see
    /// [`refused`](Self::refused)). Returns whether it was already lost, which the release
    /// reports.
    pub(crate) fn stop(&self, now: Instant) -> bool {
        let mut times = self.times();
        let lost = self.status_locked(&mut times, now) == Status::Lost;
        if times.ending == Ending::Held {
            times.ending = Ending::Stopped { refusal: None };
        }
        let sync_waiters = times.sync_waiters > 0;
        drop(times);
        self.signal(sync_waiters);
        lost
    }

    /// Whether the watchdog renews this lease.
    pub(crate) fn renews(&self) -> bool {
        self.renews
    }

    /// Whether the guard has released or dropped the lease.
    pub(crate) fn is_stopped(&self) -> bool {
        self.times().ending != Ending::Held
    }

    /// Until when the lease may be relied on (frozen once lost).
    pub(crate) fn valid_until(&self) -> Instant {
        self.times().valid_until
    }

    /// When the server expires the key by itself, at the latest as far as this process
    /// can tell: over every command sent for the lease, answered or not (a renewal in
    /// flight may have moved the key's end), its send time plus its ttl, plus the
    /// response timeout for one that ran late.
    pub(crate) fn expires(&self) -> Instant {
        self.times().farthest
    }

    /// How long the lease can still be relied on.
    pub(crate) fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// An `extend(ttl)` about to be sent at `now`: refused with a typed error when the
    /// ttl is out of range or the lease is lost already (nothing is sent then).
    pub(crate) fn extending(&self, ttl: Duration, now: Instant) -> Result<Sending, LockError> {
        crate::machine::limit::check_ttl(ttl)?;
        if self.status(now) == Status::Lost {
            return Err(self.not_held());
        }
        Ok(self.sending(ttl, now))
    }

    /// Marks a renewal or extension for `ttl` as sent (at `now`, or a little later). Its
    /// answer goes back with the returned [`Sending`].
    ///
    /// This is where the order of a lease's commands is kept honest. Two commands in
    /// flight at once may run on the server in either order (two connections, a pool, a
    /// reconnect, two tasks racing to one socket), and one that got no answer may still
    /// run after any later one. So a confirmation counts the lease from the latest send
    /// time confirmed so far, but for the *shortest* ttl among the commands whose order
    /// it cannot know: the key lives at least that long whichever ran last.
    pub(crate) fn sending(&self, ttl: Duration, now: Instant) -> Sending {
        self.sending_locked(&mut self.times(), ttl, now)
    }

    /// Tells everyone waiting on the lease (its `lost()` and `suspect()` futures, threads
    /// in [`within`](Self::within)) to look again.
    fn signal(&self, sync_waiters: bool) {
        self.changed.notify_waiters();
        if sync_waiters {
            self.changed_sync.notify_all();
        }
    }

    fn sending_locked(&self, times: &mut Times, ttl: Duration, now: Instant) -> Sending {
        // A command for less than what is left shortens the key's life if it runs last:
        // from any instant it runs on, it leaves the key `ttl` at least from `now`, and no
        // more. Until an answer says when it ran (and for good if none comes), the lease
        // is relied on no longer than that, and the watchdog renews at its pace.
        let bound = now + validity(ttl);
        if bound < times.valid_until && !crate::machine::mutants::shorter_extend_trusted() {
            times.valid_until = bound;
            times.next_renewal = times.next_renewal.min(now + renew_interval(ttl));
            self.signal(times.sync_waiters > 0);
        }
        let id = times.next_id;
        times.next_id += 1;
        let low = times.flying.iter().map(|f| f.ttl).min();
        if let Some(low) = low.filter(|_| !crate::machine::mutants::overlap_ignored()) {
            let low = low.min(ttl);
            times.overlap = Some(times.overlap.map_or(low, |o| o.min(low)));
        }
        times.flying.push(Flight { id, ttl });
        let farthest = now + ttl + self.settings.response_timeout;
        times.farthest = times.farthest.max(farthest);
        Sending {
            id,
            ttl,
            at: now,
            valid_until: times.valid_until,
        }
    }

    /// `sending` was answered or given up: out of the flight. Returns the ttl a
    /// confirmation of it may be counted for (see [`sending`](Self::sending)).
    fn land(times: &mut Times, sending: Sending) -> Duration {
        times.flying.retain(|f| f.id != sending.id);
        let mut ttl = sending.ttl;
        for bound in [times.overlap, times.unsure].into_iter().flatten() {
            ttl = ttl.min(bound);
        }
        if times.flying.is_empty() {
            times.overlap = None;
        }
        ttl
    }

    /// `sending` failed in a way that may have run it (no reply): it may still run on
    /// the server after any later command, so every later confirmation counts for at
    /// most its ttl.
    fn unanswered(&self, sending: Sending, error: &LockError) {
        let mut times = self.times();
        Self::land(&mut times, sending);
        if error.may_have_run() {
            times.unsure = Some(times.unsure.map_or(sending.ttl, |u| u.min(sending.ttl)));
        }
    }

    /// `sending`, sent at `sent`, was confirmed at `now`. Returns `false` if it came too
    /// late: the lease had run out meanwhile (or was stopped), and a lost lease is never
    /// revived.
    pub(crate) fn renewed(&self, sending: Sending, sent: Instant, now: Instant) -> bool {
        let mut times = self.times();
        let ttl = Self::land(&mut times, sending);
        if !matches!(self.status_locked(&mut times, now), Status::Held { .. }) {
            return false;
        }
        if sent >= times.sent {
            times.sent = sent;
            times.ttl = sending.ttl;
        }
        times.valid_until = times.sent + validity(ttl);
        times.next_renewal = times.sent + renew_interval(ttl);
        times.suspect = false;
        drop(times);
        self.changed.notify_waiters();
        true
    }

    /// What an `extend` reports, from what the server answered (`Ok(Some(from))`:
    /// renewed, the new lease counting from `from`; `Ok(None)`: not ours).
    pub(crate) fn extended(
        &self,
        sending: Sending,
        reply: Result<Option<Instant>, LockError>,
        now: Instant,
    ) -> Result<(), LockError> {
        let renewed = match reply {
            Ok(renewed) => renewed,
            Err(e) => {
                self.unanswered(sending, &e);
                return Err(e);
            }
        };
        let Some(from) = renewed else {
            Self::land(&mut self.times(), sending);
            self.refused("the key changed owner or vanished");
            return Err(self.not_held());
        };
        // Confirmed after the validity end, the lease had run out meanwhile.
        if !self.renewed(sending, from, now) {
            return Err(self.not_held());
        }
        tracing::debug!(lock = %self.keys.name, ttl = ?sending.ttl, "lease extended");
        Ok(())
    }

    /// What a release reports, from whether the lease was lost before it (see
    /// [`stop`](Self::stop)) and what the delete answered. `Ok(done)`: the release is
    /// over (`done` false only when the delete failed and must be retried in the
    /// background, which drop does).
    pub(crate) fn released(
        &self,
        lost_before: bool,
        deleted: Result<bool, LockError>,
    ) -> (bool, Result<(), LockError>) {
        match deleted {
            Ok(true) if !lost_before => {
                tracing::debug!(lock = %self.keys.name, fence = self.fence, "lock released");
                self.settle(End::Released);
                (true, Ok(()))
            }
            Ok(_) => (true, Err(self.lost_on_release())),
            // A lease lost before the release, or refused while it was on its way (a
            // renewal's refusal that the release could not disprove), is reported as
            // such in any case: the delete's own failure tells the caller less.
            Err(_) if lost_before || self.refusal().is_some() => {
                (false, Err(self.lost_on_release()))
            }
            Err(e) => (false, Err(e)),
        }
    }

    /// The lease's release (a delete or a handover: [`End::Released`]; a downgrade:
    /// [`End::Downgraded`]) found the key ours: the lease ends here, held until now, and
    /// is never lost, whatever a renewal that reached the server after it was told.
    pub(crate) fn settle(&self, end: End) {
        let mut times = self.times();
        if times.ending == Ending::Settled || times.lost.is_some() {
            return;
        }
        times.ending = Ending::Settled;
        drop(times);
        let held = Instant::now().saturating_duration_since(self.since);
        crate::machine::metrics::ended(&self.keys.name, held, end);
    }

    /// A refusal that came after the stop and that no release has answered yet.
    fn refusal(&self) -> Option<&'static str> {
        match self.times().ending {
            Ending::Stopped { refusal } => refusal,
            Ending::Held | Ending::Settled => None,
        }
    }

    /// A release found the key gone or owned by another, or the lease was lost before
    /// (or a renewal was refused and the release could not say otherwise): the loss is
    /// signalled, and the caller hears [`LockError::NotHeld`].
    pub(crate) fn lost_on_release(&self) -> LockError {
        let mut times = self.times();
        let refusal = match &mut times.ending {
            Ending::Stopped { refusal } => refusal.take(),
            Ending::Held | Ending::Settled => None,
        };
        let why = refusal.unwrap_or("released after the key changed owner or vanished");
        self.lose(&mut times, why);
        drop(times);
        self.not_held()
    }

    /// The guard's answer to `is_held`, from whether the server holds its token.
    pub(crate) fn checked(&self, ours: bool) -> bool {
        if !ours {
            self.refused("the key changed owner or vanished");
        }
        ours && !self.is_lost()
    }

    pub(crate) fn not_held(&self) -> LockError {
        LockError::NotHeld {
            name: self.keys.name.clone(),
        }
    }

    /// A guard's `Debug`: name, fencing token and whether it is lost; the token redacted.
    pub(crate) fn debug(&self, f: &mut std::fmt::Formatter<'_>, guard: &str) -> std::fmt::Result {
        f.debug_struct(guard)
            .field("name", &self.keys.name)
            .field("fencing_token", &self.fence)
            .field("lost", &self.is_lost())
            .field("token", &self.token)
            .finish_non_exhaustive()
    }

    /// The watchdog's question: if a renewal is due at `now` (or within
    /// [`renew_early`] of it, to go with others), it is marked in flight and returned
    /// (its lease length in it); `None` if nothing is to be sent.
    pub(crate) fn begin_renewal(&self, now: Instant) -> Option<Sending> {
        let mut times = self.times();
        let held = matches!(self.status_locked(&mut times, now), Status::Held { .. });
        if !held || !self.renews_at(now) || !times.renewal_may_go(now) {
            return None;
        }
        times.renewing = true;
        let ttl = times.ttl;
        Some(self.sending_locked(&mut times, ttl, now))
    }

    /// Whether this lease's renewal may go at `now` with others (due, or due within
    /// [`renew_early`] of `now`, and none in flight): the watchdogs' pick of the leases
    /// to add to a round trip that goes anyway. The others stay queued untouched.
    pub(crate) fn renewal_due(&self, now: Instant) -> bool {
        self.times().renewal_may_go(now)
    }

    /// The renewal in flight ended with `reply` (`Ok(Some(from))`: renewed, counting
    /// from `from`; `Ok(None)`: not ours any more) at `now`. A failed renewal is tried
    /// again a little later, while the lease lasts.
    pub(crate) fn renewal_done(
        &self,
        sending: Sending,
        reply: Result<Option<Instant>, LockError>,
        now: Instant,
    ) {
        let name = &self.keys.name;
        let took = now.saturating_duration_since(sending.at);
        match reply {
            Ok(Some(from)) => {
                crate::machine::metrics::renewed(name, took, Ok(true));
                if self.renewed(sending, from, now) {
                    tracing::trace!(lock = %self.keys.name, fence = self.fence, "lease renewed");
                }
                self.end_renewal(None);
            }
            Ok(None) => {
                crate::machine::metrics::renewed(name, took, Ok(false));
                Self::land(&mut self.times(), sending);
                self.refused("the key changed owner or vanished");
                self.end_renewal(None);
            }
            Err(e) => {
                crate::machine::metrics::renewed(name, took, Err(()));
                self.unanswered(sending, &e);
                let retry = retry_delay(sending.ttl);
                self.end_renewal(Some(now + retry));
                self.suspected(now);
                if !self.is_stopped() {
                    tracing::warn!(lock = %self.keys.name, error = %e, retry_in = ?retry, "lease renewal failed; the lease is suspect");
                }
            }
        }
    }

    /// The renewal in flight ended; if it failed, the next try is at `retry_at`. The
    /// order matters: a renewal's outcome is recorded first, so the watchdog never sees
    /// the renewal done with the old times.
    fn end_renewal(&self, retry_at: Option<Instant>) {
        let mut times = self.times();
        times.renewing = false;
        if let Some(at) = retry_at {
            times.next_renewal = at;
        }
    }

    fn renews_at(&self, now: Instant) -> bool {
        self.renews && self.renew_until.is_none_or(|until| now < until)
    }

    /// When the watchdog should look at this lease next: the next renewal (unless one is
    /// in flight), and in any case the validity end, when the loss is logged. `None` once
    /// there is nothing left to watch.
    pub(crate) fn next_action(&self, now: Instant) -> Option<Instant> {
        let mut times = self.times();
        let Status::Held { valid_until } = self.status_locked(&mut times, now) else {
            return None;
        };
        // (With the deadline switched off, only renewals are left to watch.)
        let end = (!crate::machine::mutants::no_deadline()).then_some(valid_until);
        let renewal = (self.renews_at(now) && !times.renewing).then_some(times.next_renewal);
        match (renewal, end) {
            (Some(renewal), Some(end)) => Some(renewal.min(end)),
            (renewal, end) => renewal.or(end),
        }
    }

    /// A renewal failed at `now` while the lease was valid: it is suspect until one is
    /// confirmed (nothing changes for a released or lost lease, or one already suspect).
    fn suspected(&self, now: Instant) {
        let mut times = self.times();
        let held = matches!(self.status_locked(&mut times, now), Status::Held { .. });
        if !held || times.suspect {
            return;
        }
        times.suspect = true;
        let sync_waiters = times.sync_waiters > 0;
        drop(times);
        crate::machine::metrics::suspected(&self.keys.name);
        self.signal(sync_waiters);
    }

    /// Whether the lease is suspect now: held, and the last renewal failed.
    pub(crate) fn is_suspect(&self) -> bool {
        let mut times = self.times();
        let held = matches!(
            self.status_locked(&mut times, Instant::now()),
            Status::Held { .. }
        );
        held && times.suspect
    }

    /// Whether `awaited` has come at `now` (`Ok`), or else until when at the latest to
    /// wait before looking again (`None`: only a change of the lease can bring it).
    fn watch(
        &self,
        times: &mut Times,
        now: Instant,
        awaited: Awaited,
    ) -> Result<(), Option<Instant>> {
        match self.status_locked(times, now) {
            Status::Lost => Ok(()),
            Status::Held { .. } if awaited == Awaited::Suspect && times.suspect => Ok(()),
            Status::Held { valid_until } if !crate::machine::mutants::no_deadline() => {
                Err(Some(valid_until))
            }
            // A release that finds the key gone or another owner's still makes the
            // lease lost; a release that succeeded changes nothing more.
            Status::Released | Status::Held { .. } => Err(None),
        }
    }

    /// Resolves once `awaited` comes: the loss at the validity end at the latest,
    /// whatever any command in flight does, or when a renewal or release finds the key
    /// gone; suspicion when a renewal fails (or the loss, if it comes first). Never
    /// resolves for a lease released in time.
    pub(crate) async fn until(&self, awaited: Awaited) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let wake = match self.watch(&mut self.times(), Instant::now(), awaited) {
                Ok(()) => return,
                Err(wake) => wake,
            };
            match wake {
                Some(at) => {
                    tokio::select! {
                        () = changed => {}
                        () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// Blocks until `awaited` comes (see [`until`](Self::until)) or `timeout` passes;
    /// whether it came.
    pub(crate) fn within(&self, timeout: Duration, awaited: Awaited) -> bool {
        let give_up = Instant::now().checked_add(timeout);
        let mut times = self.times();
        loop {
            let now = Instant::now();
            let wake = match self.watch(&mut times, now, awaited) {
                Ok(()) => return true,
                Err(Some(at)) => Some(give_up.map_or(at, |g| g.min(at))),
                Err(None) => give_up,
            };
            if wake.is_some_and(|at| at <= now) {
                return false;
            }
            times.sync_waiters += 1;
            times = match wake {
                Some(at) => {
                    self.changed_sync
                        .wait_timeout(times, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed_sync
                    .wait(times)
                    .unwrap_or_else(PoisonError::into_inner),
            };
            times.sync_waiters -= 1;
            if give_up.is_some_and(|g| Instant::now() >= g) {
                return self.watch(&mut times, Instant::now(), awaited).is_ok();
            }
        }
    }
}

/// For the model checker (feature `model`): what tells two leases apart (it finds the
/// states it has seen by their digests), and a copy for each branch it takes.
#[cfg(feature = "model")]
impl LeaseState {
    /// Everything of the lease that a later call can depend on, except the owner token:
    /// drawn at random, it differs between two runs of one history (the model names
    /// tokens by where they are used). The instants are the model's own, the same in
    /// every run.
    pub(crate) fn digest(&self, state: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        (self.fence, self.renews, self.renew_until).hash(state);
        self.times().hash(state);
    }

    /// When the renewal that [`renewed`](Self::renewed) counts from was sent: what a
    /// confirmed renewal reports to [`renewal_done`](Self::renewal_done).
    pub(crate) fn sent_at(sending: &Sending) -> Instant {
        sending.at
    }

    /// A copy that goes on alone from here, for the model checker's branches: the same
    /// lease (token, fence, times), with waiters of its own.
    pub(crate) fn fork(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            token: self.token.clone(),
            settings: Arc::clone(&self.settings),
            times: Mutex::new(self.times().clone()),
            changed: Notify::new(),
            changed_sync: Condvar::new(),
            ..*self
        }
    }
}

impl LeaseState {
    /// Resolves once the lease is lost (see [`until`](Self::until)).
    pub(crate) async fn lost(&self) {
        self.until(Awaited::Lost).await;
    }

    /// Blocks until the lease is lost or `timeout` passes; whether it was lost.
    pub(crate) fn lost_within(&self, timeout: Duration) -> bool {
        self.within(timeout, Awaited::Lost)
    }
}

/// What a waiter on a lease waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Awaited {
    /// The loss.
    Lost,
    /// A failed renewal while the lease is valid, or the loss.
    Suspect,
}

/// A held lease: its name, fencing token, validity and loss signal. Every guard derefs
/// to its lease, so these are the guard's methods too (`guard.fencing_token()`); a
/// clone ([`LeaseGuard::lease`](crate::LeaseGuard::lease)) is a cheap view to hand to
/// another task. It cannot release or extend; the guard does that.
///
/// ```no_run
/// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
/// let done = locks
///     .with_lock("orders:42", |lease| async move {
///         println!("writing with fencing token {}", lease.fencing_token());
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Lease {
    pub(crate) lease: Arc<LeaseState>,
}

impl Lease {
    /// The lease `granted` starts, with the handovers in a row that led to it.
    /// `one_node`: the backend keeps a grant on one server (or Cluster slot), so a
    /// guarded script can check it, unless the grant is a shared one.
    pub(crate) fn of(granted: Granted, settings: &Arc<Settings>, one_node: bool) -> (Lease, u32) {
        let Granted {
            keys,
            token,
            grant,
            started,
            watchdog,
            downgrade,
        } = granted;
        let one_node = one_node && !keys.kind.shared();
        let waited = grant.sent.saturating_duration_since(started);
        if !downgrade {
            let handed_over = grant.handovers > 0;
            crate::machine::metrics::acquired(&keys.name, waited, grant.attempts, handed_over);
        }
        let lease = LeaseState::of_grant(keys, token, &grant, settings, watchdog, one_node, waited);
        (Lease { lease }, grant.handovers)
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) { println!("{}", lease.name()); }
    /// ```
    pub fn name(&self) -> &str {
        &self.lease.keys.name
    }

    /// This grant's fencing token: strictly larger than every earlier grant's of the
    /// same lock name. Pass it with every write the lock protects, and have the store
    /// refuse a token lower than one it has seen.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) { println!("{}", lease.fencing_token()); }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.lease.fence
    }

    /// How long `lock()` waited for this grant.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) { println!("{:?}", lease.waited()); }
    /// ```
    pub fn waited(&self) -> Duration {
        self.lease.waited
    }

    /// How many acquisition attempts the call made for this grant: 1 when the lock was
    /// free; for a grant handed over by a release, the attempts made before it.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) { println!("{}", lease.attempts()); }
    /// ```
    pub fn attempts(&self) -> u32 {
        self.lease.attempts
    }

    /// Resolves when the lease is known lost: at its validity end at the latest (see
    /// [`valid_until`](Self::valid_until)) if no renewal was confirmed by then, whatever
    /// the server or the network is doing, or earlier when a renewal finds the key gone
    /// or another owner's (for Redlock: on a majority of masters). For a released lease
    /// it resolves only when the server says the lease was already gone: the release
    /// finds the key gone or another's, or it gets no answer after a renewal was
    /// refused (then [`release`](crate::LeaseGuard::release) reports
    /// [`NotHeld`](crate::LockError::NotHeld)). A lease whose release returned `Ok(())`
    /// never fires, whatever a renewal that reached the server after the release hears.
    ///
    /// ```no_run
    /// # async fn f(lease: lockscript::Lease) { lease.lost().await; eprintln!("lost"); }
    /// ```
    pub async fn lost(&self) {
        self.lease.lost().await;
    }

    /// Blocks until the lease is known lost, or `timeout` passes; whether it was lost.
    /// It returns at the lease's validity end at the latest if no renewal was confirmed
    /// by then, whatever the server is doing.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) {
    /// if lease.lost_within(std::time::Duration::from_millis(100)) { eprintln!("lost"); }
    /// # }
    /// ```
    pub fn lost_within(&self, timeout: Duration) -> bool {
        self.lease.lost_within(timeout)
    }

    /// Whether the lease is suspect (no round trip): the watchdog's last renewal failed
    /// (an error, or no reply within the response timeout: the server or the network is
    /// in trouble) while the lease is still valid, and none was confirmed since. The
    /// lease may still be ours (the renewal may even have run) and stays valid until
    /// [`valid_until`](Self::valid_until); the watchdog keeps trying. Pause or
    /// checkpoint the work the lock protects; resume when it clears (the next confirmed
    /// renewal), stop when [`is_lost`](Self::is_lost). A lost or released lease is not
    /// suspect.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) {
    /// if lease.is_suspect() { eprintln!("renewals failing: checkpoint now"); }
    /// # }
    /// ```
    pub fn is_suspect(&self) -> bool {
        self.lease.is_suspect()
    }

    /// Resolves when the lease becomes suspect (see [`is_suspect`](Self::is_suspect)):
    /// when a renewal fails while the lease is valid, or when it is lost, whichever
    /// comes first. Never resolves for a released lease. Await it again after the
    /// suspicion clears to hear of the next one.
    ///
    /// ```no_run
    /// # async fn f(lease: lockscript::Lease) {
    /// lease.suspect().await;
    /// if !lease.is_lost() { eprintln!("renewals failing; valid for {:?}", lease.remaining()); }
    /// # }
    /// ```
    pub async fn suspect(&self) {
        self.lease.until(Awaited::Suspect).await;
    }

    /// Blocks until the lease is suspect or lost, or `timeout` passes; whether it is
    /// (see [`suspect`](Self::suspect)).
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) {
    /// if lease.suspect_within(std::time::Duration::from_millis(100)) { eprintln!("suspect"); }
    /// # }
    /// ```
    pub fn suspect_within(&self, timeout: Duration) -> bool {
        self.lease.within(timeout, Awaited::Suspect)
    }

    /// Whether the lease is lost (no round trip): its validity end has passed without a
    /// confirmed renewal, or the server answered that the key is gone or has another
    /// owner. Evaluated on the clock at each call, so it turns `true` at the validity
    /// end exactly, whatever the server or the network is doing. Check it before each
    /// write the lock protects.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) { assert!(!lease.is_lost()); }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// How long the lease can still be relied on, by this process's clock.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) { println!("{:?}", lease.remaining()); }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// The lease's validity end on this process's monotonic clock: the time the
    /// granting (or last confirmed renewing) command was sent, plus the ttl, minus the
    /// drift allowance (1% + 2 ms). The server keeps the key at least that long. It
    /// moves forward with each confirmed renewal and is frozen once the lease is lost.
    ///
    /// ```no_run
    /// # fn f(lease: lockscript::Lease) { println!("{:?}", lease.valid_until()); }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.lease.debug(f, "Lease")
    }
}

/// What `with_lock`'s work is worth after the release that follows it: its value, or
/// `NotHeld` when the lease ended before the release (the work may have overlapped
/// another holder's, which is exactly what the caller must hear). Any other release
/// error leaves the value: the lease was still valid, and the release is retried in the
/// background.
pub(crate) fn after_work<T>(
    name: &str,
    released: Result<(), LockError>,
    value: T,
) -> Result<T, LockError> {
    match released {
        Ok(()) => Ok(value),
        Err(e @ LockError::NotHeld { .. }) => Err(e),
        Err(e) => {
            tracing::warn!(lock = name, error = %e, "release after with_lock failed; retried in the background");
            Ok(value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_lease(ttl_ms: u64, renews: bool) -> (LeaseState, Instant) {
        let settings = Settings {
            ttl: Duration::from_millis(ttl_ms),
            ..Settings::default()
        };
        let sent = Instant::now();
        let keys = settings.keys("t").unwrap();
        let state = LeaseState::new(
            keys,
            7,
            Token::new().unwrap(),
            Arc::new(settings),
            sent,
            renews,
        );
        (state, sent)
    }

    #[test]
    fn the_lease_is_lost_at_its_validity_end_on_the_clock() {
        let (lease, sent) = new_lease(1_000, true);
        let end = sent + validity(Duration::from_secs(1));
        assert_eq!(lease.valid_until(), end);
        assert_eq!(
            lease.status(sent + Duration::from_millis(900)),
            Status::Held { valid_until: end }
        );
        assert_eq!(lease.status(end), Status::Lost);
        // Sticky: a renewal confirmed after the end does not revive it.
        let late = lease.sending(Duration::from_secs(1), end);
        assert!(!lease.renewed(late, end, end));
        assert_eq!(lease.status(sent), Status::Lost);
    }

    #[test]
    fn a_renewal_moves_the_end_but_an_older_reply_does_not_undo_a_newer_one() {
        let (lease, sent) = new_lease(900, true);
        let ttl = Duration::from_millis(900);
        let earlier = lease.sending(ttl, sent + Duration::from_millis(100));
        let later = sent + Duration::from_millis(300);
        let newer = lease.sending(ttl, later);
        assert!(lease.renewed(newer, later, later));
        assert_eq!(
            lease.valid_until(),
            later + validity(Duration::from_millis(900))
        );
        // A renewal sent before `later` and confirmed after it changes nothing.
        assert!(lease.renewed(earlier, sent + Duration::from_millis(100), later));
        assert_eq!(
            lease.valid_until(),
            later + validity(Duration::from_millis(900))
        );
    }

    #[test]
    fn renewals_are_planned_every_third_and_one_at_a_time() {
        let (lease, sent) = new_lease(900, true);
        assert_eq!(lease.begin_renewal(sent), None, "not due yet");
        let due = sent + Duration::from_millis(300);
        assert_eq!(
            lease.next_action(sent),
            Some(due),
            "the next renewal comes first"
        );
        let sending = lease.begin_renewal(due).expect("due");
        assert_eq!(sending.ttl, Duration::from_millis(900));
        assert_eq!(lease.begin_renewal(due), None, "one in flight already");
        // While it is in flight, the watchdog still looks at the validity end.
        assert_eq!(lease.next_action(due), Some(lease.valid_until()));
        let refused = LockError::no_reply(Duration::from_millis(1));
        lease.renewal_done(sending, Err(refused), due);
        assert_eq!(
            lease.next_action(due),
            Some(due + retry_delay(Duration::from_millis(900))),
            "a failed renewal is retried soon"
        );
    }

    #[test]
    fn a_renewal_due_soon_may_go_early_to_join_others() {
        let (lease, sent) = new_lease(900, true);
        let early = renew_early(Duration::from_millis(900));
        assert_eq!(
            early,
            Duration::from_millis(30),
            "a tenth of the 300 ms interval"
        );
        let earliest = sent + Duration::from_millis(270);
        assert!(!lease.renewal_due(sent + Duration::from_millis(269)));
        assert_eq!(lease.begin_renewal(sent + Duration::from_millis(269)), None);
        assert!(lease.renewal_due(earliest));
        assert!(lease.begin_renewal(earliest).is_some());
        assert!(
            !lease.renewal_due(earliest),
            "one in flight: not picked again"
        );
        assert_eq!(
            renew_early(Duration::from_secs(30)),
            BATCH_HORIZON,
            "capped"
        );
    }

    #[test]
    fn a_failed_renewal_makes_the_lease_suspect_until_one_is_confirmed() {
        let (lease, sent) = new_lease(60_000, true);
        assert!(!lease.is_suspect());
        assert!(!lease.within(Duration::ZERO, Awaited::Suspect));
        let due = sent + Duration::from_secs(20);
        let first = lease.begin_renewal(due).expect("due");
        let failed = LockError::no_reply(Duration::from_millis(500));
        lease.renewal_done(first, Err(failed), Instant::now());
        assert!(lease.is_suspect() && !lease.is_lost());
        assert!(lease.within(Duration::ZERO, Awaited::Suspect));
        assert!(
            !lease.within(Duration::ZERO, Awaited::Lost),
            "suspect is not lost"
        );
        let retry = lease
            .begin_renewal(due + Duration::from_secs(1))
            .expect("retried");
        let now = Instant::now();
        lease.renewal_done(retry, Ok(Some(now)), now);
        assert!(!lease.is_suspect(), "a confirmed renewal clears it");
        // A refusal is a loss, not a suspicion; the suspect signal fires for it too.
        let third = lease
            .begin_renewal(now + Duration::from_secs(20))
            .expect("due");
        lease.renewal_done(third, Ok(None), Instant::now());
        assert!(lease.is_lost() && !lease.is_suspect());
        assert!(lease.within(Duration::ZERO, Awaited::Suspect));
    }

    #[test]
    fn a_released_lease_is_never_suspect() {
        let (lease, sent) = new_lease(60_000, true);
        let sending = lease
            .begin_renewal(sent + Duration::from_secs(20))
            .expect("due");
        lease.stop(Instant::now());
        lease.renewal_done(
            sending,
            Err(LockError::no_reply(Duration::ZERO)),
            Instant::now(),
        );
        assert!(!lease.is_suspect());
        assert!(!lease.within(Duration::from_millis(20), Awaited::Suspect));
    }

    #[test]
    fn a_blocked_suspect_within_wakes_at_the_failed_renewal() {
        let (lease, sent) = new_lease(60_000, true);
        let lease = Arc::new(lease);
        let sending = lease
            .begin_renewal(sent + Duration::from_secs(20))
            .expect("due");
        let waiter = {
            let lease = Arc::clone(&lease);
            std::thread::spawn(move || {
                let suspect = lease.within(Duration::from_secs(30), Awaited::Suspect);
                (suspect, Instant::now())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        let failed_at = Instant::now();
        lease.renewal_done(sending, Err(LockError::no_reply(Duration::ZERO)), failed_at);
        let (suspect, woke) = waiter.join().unwrap();
        assert!(suspect);
        assert!(
            woke.duration_since(failed_at) < Duration::from_secs(1),
            "woken, not timed out"
        );
    }

    #[test]
    fn without_the_watchdog_only_the_end_is_watched() {
        let (lease, sent) = new_lease(900, false);
        assert_eq!(lease.next_action(sent), Some(lease.valid_until()));
        assert_eq!(lease.begin_renewal(sent + Duration::from_millis(400)), None);
    }

    #[test]
    fn a_stopped_lease_does_not_run_out_and_a_lost_one_says_so_on_stop() {
        let (lease, sent) = new_lease(100, true);
        assert!(!lease.stop(sent));
        assert_eq!(
            lease.status(sent + Duration::from_secs(5)),
            Status::Released
        );
        assert!(!lease.is_lost());

        let (lease, _) = new_lease(100, true);
        lease.refused("gone");
        assert!(
            lease.stop(Instant::now()),
            "a release after the loss reports it"
        );
        assert!(lease.is_lost());
    }

    /// A command's error when no reply came within the response timeout.
    fn timed_out() -> LockError {
        LockError::Redis(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::TimedOut,
        )))
    }

    #[test]
    fn a_renewal_refused_during_a_release_that_fails_makes_it_report_the_loss() {
        // A renewal on its way when the release began (behind a delay on the connection)
        // is refused; the release's delete then gets no answer. The caller hears that
        // the lease was lost, not the delete's timeout.
        let (lease, sent) = new_lease(300, true);
        let renewal = lease
            .begin_renewal(sent + Duration::from_millis(100))
            .unwrap();
        let lost_before = lease.stop(Instant::now());
        assert!(!lost_before);
        lease.renewal_done(renewal, Ok(None), sent + Duration::from_millis(400));
        let (done, reported) = lease.released(lost_before, Err(timed_out()));
        assert!(!done, "the delete is still owed");
        assert!(
            matches!(reported, Err(LockError::NotHeld { .. })),
            "{reported:?}"
        );
        // Without the refusal, the delete's failure is what the caller hears.
        let (lease, _) = new_lease(300, true);
        let (_, reported) = lease.released(lease.stop(Instant::now()), Err(timed_out()));
        assert!(matches!(reported, Err(LockError::Redis(_))), "{reported:?}");
    }

    #[test]
    fn a_lease_whose_release_found_the_key_is_never_lost_whatever_a_late_renewal_hears() {
        // Issue 37, defect 5: a renewal marked in flight before the release reaches the
        // server after it (it waited for the connection, or went on another one) and is
        // refused. Whichever answer comes first, the release's `Ok` stands.
        let (lease, sent) = new_lease(900, true);
        let renewal = lease
            .begin_renewal(sent + Duration::from_millis(300))
            .unwrap();
        let lost_before = lease.stop(Instant::now());
        let (done, reported) = lease.released(lost_before, Ok(true));
        assert!(done && reported.is_ok(), "{reported:?}");
        lease.renewal_done(renewal, Ok(None), sent + Duration::from_millis(320));
        assert!(!lease.is_lost(), "the refusal came after the release");
        assert!(!lease.within(Duration::ZERO, Awaited::Lost));

        let (lease, sent) = new_lease(900, true);
        let renewal = lease
            .begin_renewal(sent + Duration::from_millis(300))
            .unwrap();
        let lost_before = lease.stop(Instant::now());
        lease.renewal_done(renewal, Ok(None), sent + Duration::from_millis(310));
        assert!(
            !lease.is_lost(),
            "refused before the release answered: not a loss yet"
        );
        let (done, reported) = lease.released(lost_before, Ok(true));
        assert!(done && reported.is_ok(), "{reported:?}");
        assert!(!lease.is_lost(), "the release found the key ours");

        // A release that finds the key gone makes the refusal a loss.
        let (lease, sent) = new_lease(900, true);
        let renewal = lease
            .begin_renewal(sent + Duration::from_millis(300))
            .unwrap();
        let lost_before = lease.stop(Instant::now());
        lease.renewal_done(renewal, Ok(None), sent + Duration::from_millis(310));
        let (_, reported) = lease.released(lost_before, Ok(false));
        assert!(matches!(reported, Err(LockError::NotHeld { .. })));
        assert!(lease.is_lost());
    }

    #[test]
    fn a_downgraded_write_lease_is_never_lost_after_it() {
        let (lease, sent) = new_lease(900, true);
        let renewal = lease
            .begin_renewal(sent + Duration::from_millis(300))
            .unwrap();
        lease.stop(Instant::now());
        lease.settle(End::Downgraded);
        lease.renewal_done(renewal, Ok(None), sent + Duration::from_millis(320));
        assert!(!lease.is_lost());
        assert_eq!(
            lease.status(sent + Duration::from_secs(5)),
            Status::Released
        );
    }

    #[test]
    fn lost_within_returns_at_the_validity_end() {
        let (lease, _) = new_lease(50, true);
        let end = lease.valid_until();
        assert!(lease.lost_within(Duration::from_secs(5)));
        let now = Instant::now();
        assert!(now >= end);
        assert!(now - end < Duration::from_millis(200), "{:?}", now - end);
        let (lease, _) = new_lease(10_000, true);
        assert!(!lease.lost_within(Duration::from_millis(5)));
    }

    #[test]
    fn a_blocked_lost_within_wakes_at_the_loss() {
        // The condvar is signalled only while a thread is counted as waiting; a missed
        // signal would leave this one asleep for its whole 30 s timeout (the lease is
        // good for a minute), so a return within 1 s of the loss proves the wake-up.
        let (lease, _) = new_lease(60_000, true);
        let lease = Arc::new(lease);
        let waiter = {
            let lease = Arc::clone(&lease);
            std::thread::spawn(move || {
                let lost = lease.lost_within(Duration::from_secs(30));
                (lost, Instant::now())
            })
        };
        while lease.times().sync_waiters == 0 {
            std::thread::yield_now();
        }
        let refused = Instant::now();
        lease.refused("gone");
        let (lost, returned) = waiter.join().unwrap();
        assert!(lost, "the loss is reported");
        let after = returned.saturating_duration_since(refused);
        assert!(
            after < Duration::from_secs(1),
            "woken {after:?} after the loss"
        );
        assert_eq!(lease.times().sync_waiters, 0);
    }

    #[test]
    fn two_commands_in_flight_at_once_count_for_the_shorter_ttl_whichever_ran_last() {
        // The review's case: extend(500 ms) queued behind another call, the watchdog's
        // renewal (6 s) sent later on another socket and run first. The extend ran last
        // on the server, so the key lives 500 ms; the lease must not believe 6 s.
        let (lease, sent) = new_lease(6_000, true);
        let short = Duration::from_millis(500);
        let t0 = sent + Duration::from_millis(1_800);
        let extend = lease.sending(short, t0);
        let t1 = sent + Duration::from_secs(2);
        let renewal = lease.sending(Duration::from_secs(6), t1);
        // Answered before the extend's own bound (t0 + its validity): past it, with no
        // confirmation, the lease had run out (the extend may have cut the key there).
        let answered = sent + Duration::from_millis(2_250);
        assert!(lease.renewed(renewal, t1, answered));
        assert_eq!(
            lease.valid_until(),
            t1 + validity(short),
            "the renewal alone"
        );
        assert!(lease.renewed(extend, t0, answered));
        assert_eq!(lease.valid_until(), t1 + validity(short), "then the extend");
        // Once nothing is in flight, a later renewal counts for its own ttl again.
        let t2 = sent + Duration::from_millis(2_450);
        let next = lease.sending(Duration::from_secs(6), t2);
        assert!(lease.renewed(next, t2, t2));
        assert_eq!(lease.valid_until(), t2 + validity(Duration::from_secs(6)));
    }

    #[test]
    fn an_extend_for_less_than_is_left_bounds_the_lease_from_when_it_is_sent() {
        // Found by the model checker: extend(200 ms) on a lease valid 300 ms more ran, its
        // answer was lost, and the holder kept the 300 ms while the key ended at 200.
        let (lease, sent) = new_lease(6_000, true);
        let short = Duration::from_millis(500);
        let t1 = sent + Duration::from_secs(1);
        let extend = lease.sending(short, t1);
        assert_eq!(
            lease.valid_until(),
            t1 + validity(short),
            "in flight, it may run last"
        );
        let _ = lease.extended(extend, Err(LockError::no_reply(short)), t1);
        assert_eq!(
            lease.valid_until(),
            t1 + validity(short),
            "with no answer, for good"
        );
        // A command for more than is left moves nothing until it is answered.
        let before = lease.valid_until();
        let _renewal = lease.sending(Duration::from_secs(6), t1 + Duration::from_millis(100));
        assert_eq!(lease.valid_until(), before);
    }

    #[test]
    fn a_command_without_an_answer_bounds_every_later_confirmation() {
        let (lease, sent) = new_lease(6_000, true);
        let short = Duration::from_millis(500);
        let lost = lease.sending(short, sent);
        let e = lease
            .extended(lost, Err(LockError::no_reply(short)), sent)
            .unwrap_err();
        assert!(e.may_have_run());
        let t1 = sent + Duration::from_millis(100);
        let renewal = lease.sending(Duration::from_secs(6), t1);
        lease.renewal_done(renewal, Ok(Some(t1)), t1);
        assert_eq!(
            lease.valid_until(),
            t1 + validity(short),
            "the unanswered extend may still run after it"
        );
        // And the watchdog renews at that pace, so the lease is kept, not lost.
        assert_eq!(lease.next_action(t1), Some(t1 + renew_interval(short)));
        // A refusal that proves nothing ran bounds nothing.
        let (lease, sent) = new_lease(6_000, true);
        let refused = lease.sending(short, sent);
        let denied = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "refused",
        ));
        let _ = lease.extended(refused, Err(LockError::Redis(denied)), sent);
        let renewal = lease.sending(Duration::from_secs(6), t1);
        lease.renewal_done(renewal, Ok(Some(t1)), t1);
        assert_eq!(lease.valid_until(), t1 + validity(Duration::from_secs(6)));
    }

    #[test]
    fn the_key_may_live_as_long_as_the_farthest_command_sent_for_it() {
        let settings = Settings::default();
        let (lease, sent) = new_lease(3_000, true);
        assert_eq!(lease.expires(), sent + Duration::from_secs(3));
        // A renewal in flight (not answered yet) may have moved the key's end.
        let t1 = sent + Duration::from_secs(1);
        let _flying = lease.sending(Duration::from_secs(3), t1);
        assert_eq!(
            lease.expires(),
            t1 + Duration::from_secs(3) + settings.response_timeout
        );
    }

    #[tokio::test]
    async fn lost_fires_at_the_validity_end_and_follows_renewals() {
        let (lease, sent) = new_lease(60, true);
        let lease = Arc::new(lease);
        let renewer = {
            let lease = Arc::clone(&lease);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                let now = Instant::now();
                let sending = lease.sending(Duration::from_millis(60), now);
                assert!(lease.renewed(sending, now, now));
            })
        };
        lease.lost().await;
        let fired = Instant::now();
        renewer.await.unwrap();
        let end = lease.valid_until();
        assert!(end > sent + validity(Duration::from_millis(60)), "renewed");
        assert!(fired >= end, "not before the end");
    }
}
