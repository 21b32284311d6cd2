//! The model checker's executor (feature `model`; for lockscript's own tests, not for
//! applications): the lock machine carried out by a model world instead of a server, a
//! network and a clock.
//!
//! Where the async and blocking executors send a call and wait for its reply, this one
//! hands the call to its caller as data and takes back the reply, or its absence, with
//! the instant it came: the model decides every order of events and every time the
//! machine sees. It does what the other executors do and no more (which machine call
//! follows which reply), so what the model checks is the machine both faces run:
//!
//! - a `lock()` by attempts ([`Handle::lock`]): one caller per handle, so its turn in the
//!   local queue comes at once; no release notifications (a sleeper wakes when the model
//!   says), no handover offers; a `try_lock()` ([`Handle::try_lock`]); a `lock()` dropped
//!   midway ([`Acquisition::cancel`]);
//! - the watchdog's renewals of a held lease ([`Holder::begin_renewal`]), and the
//!   caller's `extend` ([`Holder::begin_extend`]);
//! - `release` ([`Holder::release`]), and the drop of its guard right after, which hands a
//!   release that must be tried again to the background; a guard dropped without a
//!   release ([`Holder::drop_guard`]);
//! - the background release of every grant nobody owns ([`Orphan`]).
//!
//! Owner tokens come to the model as strings. Every object has a `digest` (what a later
//! call can depend on, the random tokens left out: the model tells states apart by it)
//! and a `fork` (a copy that goes on alone, its lease a copy too: the model branches
//! without running a history again).
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use lockscript::__private::model::{Ask, Handle, Reply};
//!
//! let ms = Duration::from_millis;
//! let handle = Handle::new("m", ms(600), ms(200), ms(1_000), ms(100)).unwrap();
//! let t0 = Instant::now();
//! let mut lock = handle.lock(t0);
//! let Ask::Attempt { token, .. } = lock.next(t0) else { panic!() };
//! // ... the model's server runs the attempt for `token`, granting fence 7:
//! lock.attempted(Reply::Answered((1, 7)), t0);
//! let Ask::Granted(holder) = lock.next(t0) else { panic!() };
//! assert_eq!(holder.fence(), 7);
//! ```

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::LockError;
use crate::exec::owned::Owned;
use crate::machine::acquire::{Acquire, Next, Wake};
use crate::machine::grant::{Abandoned, Outcome};
use crate::machine::key::{Keys, Kind};
use crate::machine::lease::{Lease, LeaseState, Sending, Status};
use crate::machine::reply::Acquired;
use crate::machine::settings::Settings;

/// A handle's settings on one lock name, as the model's clients use them.
///
/// ```no_run
/// # use std::time::Duration;
/// let ms = Duration::from_millis;
/// let handle = lockscript::__private::model::Handle::new("m", ms(600), ms(200), ms(1_000), ms(100));
/// ```
#[derive(Clone)]
pub struct Handle {
    settings: Arc<Settings>,
    keys: Keys,
}

impl Handle {
    /// A handle on lock `name`: leases of `ttl` (renewed by the watchdog), calls cut at
    /// `response_timeout`, `lock()` waiting up to `wait_timeout`, fencing counters kept
    /// `fence_retention` past a grant's lease. Refused as the faces refuse these settings.
    pub fn new(
        name: &str,
        ttl: Duration,
        response_timeout: Duration,
        wait_timeout: Duration,
        fence_retention: Duration,
    ) -> Result<Self, LockError> {
        let settings = Settings {
            ttl,
            wait_timeout,
            response_timeout,
            fence_retention,
            ..Settings::default()
        };
        settings.validate()?;
        settings.validate_kind(Kind::Lock)?;
        settings.validate_wait()?;
        let keys = settings.keys_of(name, Kind::Lock)?;
        Ok(Self {
            settings: Arc::new(settings),
            keys,
        })
    }

    /// The lease a grant asks the server for.
    ///
    /// ```no_run
    /// # fn f(handle: lockscript::__private::model::Handle) { println!("{:?}", handle.ttl()); }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.settings.ttl
    }

    /// How long the fencing counter outlives a grant (acquire-with-retry.lua's `ARGV[3]`).
    ///
    /// ```no_run
    /// # fn f(h: lockscript::__private::model::Handle) { println!("{:?}", h.fence_lifetime()); }
    /// ```
    pub fn fence_lifetime(&self) -> Duration {
        Duration::from_millis(self.settings.fence_lifetime(self.settings.ttl))
    }

    /// A `try_lock()` that begins at `now`: one attempt, granted or held.
    ///
    /// ```no_run
    /// # fn f(h: lockscript::__private::model::Handle) { let _ = h.try_lock(std::time::Instant::now()); }
    /// ```
    pub fn try_lock(&self, now: Instant) -> Acquisition {
        Acquisition {
            machine: Acquire::once(self.keys.clone(), &self.settings, now),
            settings: Arc::clone(&self.settings),
            sent: None,
        }
    }

    /// A `lock()` that begins at `now`.
    ///
    /// ```no_run
    /// # fn f(h: lockscript::__private::model::Handle) { let _ = h.lock(std::time::Instant::now()); }
    /// ```
    pub fn lock(&self, now: Instant) -> Acquisition {
        let machine = Acquire::wait(
            self.keys.clone(),
            &self.settings,
            self.settings.watchdog,
            false,
            false,
            now,
        );
        Acquisition {
            machine,
            settings: Arc::clone(&self.settings),
            sent: None,
        }
    }
}

/// What a call got back, as the model delivers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply<T> {
    /// The server's answer.
    Answered(T),
    /// No answer within the call's bound (a timeout, a reset): the command may have run.
    NoReply,
    /// An error reply: the command did not run.
    Refused,
}

impl<T> Reply<T> {
    /// As the executors hand it to the machine.
    fn into_result(self, settings: &Settings) -> Result<T, LockError> {
        match self {
            Reply::Answered(value) => Ok(value),
            Reply::NoReply => Err(LockError::no_reply(settings.response_timeout)),
            Reply::Refused => Err(LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "refused by the model's server",
            )))),
        }
    }
}

/// What a `lock()` asks of the model next.
pub enum Ask {
    /// Send one acquire-with-retry.lua attempt; its answer goes to
    /// [`Acquisition::attempted`].
    Attempt {
        /// The attempt's fresh owner token.
        token: String,
        /// When the executor gives up on the reply (then [`Reply::NoReply`]).
        give_up: Instant,
    },
    /// Sleep until a release or the nap wakes the caller, then [`Acquisition::woke`].
    Sleep,
    /// Release this grant nobody owns in the background, then ask again.
    Release(Orphan),
    /// Done: the lock is held.
    Granted(Holder),
    /// Done: `try_lock()` found the lock held by another owner (`Ok(None)`).
    Held,
    /// Done: the caller's error.
    Failed(LockError),
}

/// One `lock()` being carried out.
pub struct Acquisition {
    machine: Acquire,
    settings: Arc<Settings>,
    /// When the attempt in flight was sent: its grant's lease counts from there.
    sent: Option<Instant>,
}

impl Acquisition {
    /// What to do next, at `now`.
    pub fn next(&mut self, now: Instant) -> Ask {
        loop {
            match self.machine.next(now) {
                // One caller per handle: its turn comes at once.
                Next::Turn { .. } => self.machine.turned(false, now),
                Next::Attempt { token, limit } => {
                    self.sent = Some(now);
                    return Ask::Attempt {
                        token: token.as_str().to_owned(),
                        give_up: now + limit,
                    };
                }
                Next::Sleep { .. } => return Ask::Sleep,
                Next::Release(abandoned) => {
                    return Ask::Release(Orphan::new(abandoned, &self.settings));
                }
                Next::Done(Ok(Some(granted))) => {
                    let (held, handovers) = Lease::of(granted, &self.settings, true);
                    return Ask::Granted(Holder {
                        owned: Owned::new(held, handovers),
                        settings: Arc::clone(&self.settings),
                        renewal: None,
                        extension: None,
                        lost_before: None,
                    });
                }
                Next::Done(Err(e)) => return Ask::Failed(e),
                Next::Done(Ok(None)) => return Ask::Held,
                Next::Confirm { .. } | Next::Enter | Next::Queue { .. } | Next::Listen { .. } => {
                    return Ask::Failed(LockError::InvalidSettings(
                        "internal: a step the model's lock() does not take".to_owned(),
                    ));
                }
            }
        }
    }

    /// The attempt's reply (`(1, fence)` or `(0, pttl)`), at `now`.
    pub fn attempted(&mut self, reply: Reply<(i64, i64)>, now: Instant) {
        let sent = self.sent.take().unwrap_or(now);
        let reply = reply
            .into_result(&self.settings)
            .map(|(acquired, value)| Outcome::from_reply(Acquired(acquired, value), sent));
        self.machine.acquired(reply, now);
    }

    /// The caller drops its `lock()` at `now` (a cancelled future, a timeout around
    /// it): every grant that may exist without an owner, for the background releaser, as
    /// the faces hand them over when a `lock()` is dropped.
    pub fn cancel(mut self, now: Instant) -> Vec<Orphan> {
        let abandoned = self.machine.abandon(now);
        (abandoned.into_iter())
            .map(|a| Orphan::new(a, &self.settings))
            .collect()
    }

    /// The sleeper woke at `now` (its nap ended, or a release notification came).
    pub fn woke(&mut self, now: Instant) {
        self.machine.woke(Wake::Nap, now);
    }

    /// What tells this acquisition apart from another (tokens left out).
    pub fn digest<H: Hasher>(&self, state: &mut H) {
        self.machine.digest(state);
        self.sent.hash(state);
    }

    /// A copy that goes on alone from here (the model's branches).
    #[must_use]
    pub fn fork(&self) -> Self {
        Self {
            machine: self.machine.fork(),
            settings: Arc::clone(&self.settings),
            sent: self.sent,
        }
    }
}

/// What a lease is, as its holder finds it at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Belief {
    /// Valid until `valid_until`, unless renewed.
    Held {
        /// The validity end on the holder's clock.
        valid_until: Instant,
    },
    /// Known lost.
    Lost,
    /// Given up before it was lost.
    Released,
}

/// A granted lock: its guard's lease, the watchdog's renewal in flight, the release.
pub struct Holder {
    owned: Owned,
    settings: Arc<Settings>,
    renewal: Option<Sending>,
    /// The caller's `extend` in flight.
    extension: Option<Sending>,
    /// Set when the release began: whether the lease was lost before it.
    lost_before: Option<bool>,
}

impl Holder {
    fn lease(&self) -> &LeaseState {
        self.owned.lease()
    }

    /// The owner token the lock key holds for this grant.
    pub fn token(&self) -> &str {
        self.lease().token.as_str()
    }

    /// The grant's fencing token.
    pub fn fence(&self) -> u64 {
        self.lease().fence
    }

    /// The lease as its holder finds it at `now` (a lease past its validity end is marked
    /// lost by this look, as by any).
    pub fn belief(&self, now: Instant) -> Belief {
        match self.lease().status(now) {
            Status::Held { valid_until } => Belief::Held { valid_until },
            Status::Lost => Belief::Lost,
            Status::Released => Belief::Released,
        }
    }

    /// Whether the watchdog would send a renewal at `now`.
    pub fn renewal_due(&self, now: Instant) -> bool {
        let lease = self.lease();
        self.renewal.is_none()
            && lease.renews()
            && matches!(lease.status(now), Status::Held { .. })
            && lease.renewal_due(now)
    }

    /// The watchdog's renewal at `now`, if one goes: the ttl it sets, and when the
    /// watchdog gives up on its reply. Its answer goes to
    /// [`renewal_done`](Self::renewal_done).
    pub fn begin_renewal(&mut self, now: Instant) -> Option<(Duration, Instant)> {
        let sending = self.lease().begin_renewal(now)?;
        self.renewal = Some(sending);
        Some((sending.ttl, now + self.settings.response_timeout))
    }

    /// The renewal's reply (`true`: renewed; `false`: the key is not ours), at `now`.
    pub fn renewal_done(&mut self, reply: Reply<bool>, now: Instant) {
        let Some(sending) = self.renewal.take() else {
            return;
        };
        let reply = self.confirmed(reply, &sending);
        self.lease().renewal_done(sending, reply, now);
    }

    /// A renewal's or extension's reply as the lease takes it: confirmed from when
    /// `sending` went out, or not ours.
    fn confirmed(
        &self,
        reply: Reply<bool>,
        sending: &Sending,
    ) -> Result<Option<Instant>, LockError> {
        let sent = LeaseState::sent_at(sending);
        reply
            .into_result(&self.settings)
            .map(|done| done.then_some(sent))
    }

    /// The caller's `extend(ttl)` at `now`: when it gives up on the reply, or the error
    /// `extend` returns without sending anything (the lease is lost already). Its answer
    /// goes to [`extended`](Self::extended).
    pub fn begin_extend(&mut self, ttl: Duration, now: Instant) -> Result<Instant, LockError> {
        let sending = self.lease().extending(ttl, now)?;
        self.extension = Some(sending);
        Ok(now + self.settings.response_timeout)
    }

    /// The extension's reply (`true`: extended; `false`: the key is not ours), at `now`:
    /// what `extend` returns.
    pub fn extended(&mut self, reply: Reply<bool>, now: Instant) -> Result<(), LockError> {
        let Some(sending) = self.extension.take() else {
            return Ok(());
        };
        let reply = self.confirmed(reply, &sending);
        self.lease().extended(sending, reply, now)
    }

    /// The guard is dropped at `now` without a release (an early return, a panic): the
    /// lease stops, and the grant goes to the background releaser, as the faces' drop
    /// does.
    pub fn drop_guard(&mut self, now: Instant) -> Option<Orphan> {
        let abandoned = self.owned.abandoned(now)?;
        Some(Orphan::new(abandoned, &self.settings))
    }

    /// `release()` begins at `now`: the lease stops, and its compare-and-delete goes out
    /// (the executor gives up on its reply at the instant returned). Its answer goes to
    /// [`released`](Self::released).
    pub fn release(&mut self, now: Instant) -> Instant {
        let (lost_before, _) = self.owned.give_up(None, now);
        self.lost_before = Some(lost_before);
        now + self.settings.response_timeout
    }

    /// The release's reply (`true`: deleted; `false`: the key was not ours), at `now`:
    /// what `release()` returns, and the release to try again in the background when the
    /// guard, dropped right after, still owes one.
    pub fn released(
        &mut self,
        reply: Reply<bool>,
        now: Instant,
    ) -> (Result<(), LockError>, Option<Orphan>) {
        let lost_before = self.lost_before.unwrap_or(false);
        let outcome = self
            .owned
            .deleted(lost_before, reply.into_result(&self.settings));
        let again = self.owned.abandoned(now);
        let orphan = again.map(|a| Orphan::new(a, &self.settings));
        (outcome, orphan)
    }

    /// What tells this holder apart from another (its token left out).
    pub fn digest<H: Hasher>(&self, state: &mut H) {
        self.lease().digest(state);
        (self.renewal, self.extension).hash(state);
        self.lost_before.hash(state);
    }

    /// A copy that goes on alone from here, its lease a copy too (the model's branches).
    #[must_use]
    pub fn fork(&self) -> Self {
        Self {
            owned: self.owned.fork(),
            settings: Arc::clone(&self.settings),
            renewal: self.renewal,
            extension: self.extension,
            lost_before: self.lost_before,
        }
    }
}

/// A grant nobody owns, released in the background with its own token until its TTL
/// frees it anyway.
pub struct Orphan {
    abandoned: Abandoned,
    settings: Arc<Settings>,
    failures: u32,
    /// When the try on its way was sent.
    sent: Option<Instant>,
}

impl Orphan {
    fn new(abandoned: Abandoned, settings: &Arc<Settings>) -> Self {
        Self {
            abandoned,
            settings: Arc::clone(settings),
            failures: 0,
            sent: None,
        }
    }

    /// The grant's owner token, which its compare-and-delete names.
    pub fn token(&self) -> &str {
        self.abandoned.token.as_str()
    }

    /// The release is sent at `now`: when the background task gives up on its reply.
    pub fn sending(&mut self, now: Instant) -> Instant {
        self.sent = Some(now);
        now + self.settings.response_timeout
    }

    /// The compare-and-delete answered `reply` at `now`: when to try again, or `None`
    /// when the background release is over.
    pub fn released(&mut self, reply: Reply<bool>, now: Instant) -> Option<Instant> {
        let reply = reply.into_result(&self.settings);
        let again = self.abandoned.released(
            reply.as_ref().copied(),
            self.failures,
            self.sent.unwrap_or(now),
            now,
        );
        self.failures += 1;
        again
    }

    /// What tells this background release apart from another (its token left out).
    pub fn digest<H: Hasher>(&self, state: &mut H) {
        let a = &self.abandoned;
        (a.until, a.unanswered, &a.ticket, self.failures, self.sent).hash(state);
    }

    /// A copy that goes on alone from here (the model's branches).
    #[must_use]
    pub fn fork(&self) -> Self {
        Self {
            abandoned: self.abandoned.clone(),
            settings: Arc::clone(&self.settings),
            failures: self.failures,
            sent: self.sent,
        }
    }
}
