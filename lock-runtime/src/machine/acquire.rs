//! One acquisition as an I/O-free machine: `try_lock()`, `lock()` and their fair,
//! read/write and semaphore forms, for every face and executor.
//!
//! The machine is fed replies, wake-ups and the current [`Instant`], and answers what
//! to do next ([`Next`]): take a turn in the handle's local queue, send an attempt (or a
//! fair queue call, or a grant's confirmation), listen for notifications, sleep until a
//! wake-up, release a grant nobody owns in the background, or stop with a grant or an
//! error. It holds no connection, no runtime and no waiting primitive; the async
//! executor (`engine.rs`) and the blocking one (`blocking/mod.rs`) carry its answers out
//! and hold nothing of the protocol themselves.
//!
//! The rules it applies, each written here once:
//! - **A fresh owner token per attempt**, and **nothing orphaned**: a grant that may
//!   exist without an owner (its reply was lost, came after its validity, failed its
//!   confirmation, or the caller gave up with it in flight) comes out as
//!   [`Next::Release`], with its own token (see [`crate::machine::grant`]).
//! - **A late grant is no grant**: an attempt's, a confirmation's, a fair reply's, a
//!   handoff letter's or a local handover's grant whose validity has ended when it
//!   arrives is released and does not count.
//! - **The wait loop** of [`crate::machine::wait`], and for fair waits the ticket, its renewals
//!   and the server's clock of [`crate::machine::fair`].
//! - **Handover offers**: a plain waiter stands an offer from its first refusal on, which a
//!   releasing guard of the same handle takes to hand the lock over in one round trip.

use std::time::{Duration, Instant};

use crate::LockError;
use crate::machine::fair::Letter;
use crate::machine::fair::{self, Answer, Reading, Ticket};
use crate::machine::grant::{Abandoned, Attempted, Grant, Granted, Outcome, kind_refused};
use crate::machine::key::{Keys, Kind};
use crate::machine::limit::validity;
use crate::machine::settings::Settings;
use crate::machine::token::Token;
use crate::machine::wait::{Progress, Step, Wait};

/// What the executor does next.
pub(crate) enum Next {
    /// Wait for this caller's turn in the handle's local queue until `until`, then
    /// [`turned`](Acquire::turned) (or [`no_turn`](Acquire::no_turn) at `until`).
    Turn { until: Instant },
    /// Send one attempt for `token`, cut at `limit`; then [`acquired`](Acquire::acquired).
    Attempt { token: Token, limit: Duration },
    /// Confirm the fresh grant of `token` (`WAIT` for replicas) within `left`; then
    /// [`confirmed`](Acquire::confirmed).
    Confirm { token: Token, left: Duration },
    /// Open the mailbox of the fair ticket [`ticket`](Acquire::ticket); then
    /// [`entered`](Acquire::entered).
    Enter,
    /// Send fair-queue.lua's `acquire` for [`ticket`](Acquire::ticket), cut at `limit`;
    /// then [`queued`](Acquire::queued).
    Queue { limit: Duration },
    /// Stand `offer` (as for [`Next::Sleep`]), subscribe (plain: the lock's release
    /// channel; fair: the handle's handoff channel) and wait at most `within` until it is
    /// live; then [`listened`](Acquire::listened).
    Listen {
        within: Duration,
        offer: Option<Token>,
    },
    /// Stand `offer` (when given: the owner token a local handover grants) and sleep until
    /// a release, a handover, a handoff letter or `nap`; then [`woke`](Acquire::woke).
    Sleep { nap: Duration, offer: Option<Token> },
    /// Release this grant nobody owns in the background; then ask again.
    Release(Abandoned),
    /// Done: the grant, `None` when a single try found the lock held, or the caller's
    /// error.
    Done(Result<Option<Granted>, LockError>),
}

/// What woke a sleeping waiter.
pub(crate) enum Wake {
    /// Its nap ended, or a release notification came.
    Nap,
    /// A releaser of this handle took the offer and finished: the handover's fencing
    /// token, send time and streak when it happened, `None` when it did not.
    Handed(Option<Handover>),
    /// Its fair handoff letter.
    Letter(Letter),
}

/// A local handover as the waiter receives it.
pub(crate) struct Handover {
    pub(crate) fence: u64,
    /// When handover.lua was sent: the lease counts from here.
    pub(crate) sent: Instant,
    /// Handovers in a row this grant ends, counting itself.
    pub(crate) streak: u32,
}

/// A command in flight.
#[derive(Clone)]
struct Flight {
    token: Token,
    sent: Instant,
    limit: Duration,
    /// A grant by this command may exist (after the attempt's reply: awaiting its
    /// confirmation).
    fence: Option<u64>,
}

impl Flight {
    /// The latest instant the granting command went out: an attempt is bounded by its
    /// limit, and its command may go after a first round trip within it (the acquire
    /// transaction after the connection's clock question, the script after a refused
    /// transaction). A grant it made is gone `ttl` after this, not after `sent`: a
    /// background release of it looks until then (the model checker found the release
    /// that stopped at `sent` + ttl while the transaction, sent 100 ms after `sent`,
    /// granted later).
    fn latest_send(&self) -> Instant {
        if crate::machine::mutants::attempt_release_from_its_start() {
            return self.sent;
        }
        self.sent + self.limit
    }
}

/// A fair waiter's place in the lock's queue on the server.
#[derive(Clone)]
struct Place {
    ticket: Ticket,
    /// A queue call for this ticket got no answer: it may still reach the server after
    /// the ticket's release.
    unanswered: bool,
    /// The lease a handoff to this ticket gives.
    claim: Duration,
    /// The server's clock, as the last queue call found it.
    reading: Option<Reading>,
    /// The handle's handoff channel, written into the ticket.
    channel: String,
    /// Whether the handle's channel has been made live once.
    listened: bool,
}

/// What the machine waits for, or has decided.
enum Todo {
    Step(Step),
    /// For the executor's report on what it was told to do.
    Await,
    Enter,
    Turn,
    Done(Next),
}

/// Which acquisition.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "model", derive(Hash))]
enum Shape {
    /// A single try: a refusal ends it.
    Once,
    /// A wait (plain or fair).
    Wait,
    /// A plain wait whose sleeps stand handover offers.
    Offering,
}

/// One acquisition.
pub(crate) struct Acquire {
    keys: Keys,
    ttl: Duration,
    response_timeout: Duration,
    started: Instant,
    watchdog: bool,
    /// Fresh grants are confirmed (`WAIT` for replicas) before they count.
    confirm: bool,
    shape: Shape,
    wait: Wait,
    place: Option<Place>,
    flight: Option<Flight>,
    /// The owner token of the standing handover offer.
    offer: Option<Token>,
    orphans: Vec<Abandoned>,
    todo: Todo,
}

impl Acquire {
    fn new(keys: Keys, settings: &Settings, watchdog: bool, now: Instant) -> Self {
        let wait = Wait::new(&keys.name, now, settings, false);
        Self {
            keys,
            ttl: settings.ttl,
            response_timeout: settings.response_timeout,
            started: now,
            watchdog,
            confirm: settings.wait_for_replicas.is_some(),
            shape: Shape::Wait,
            wait,
            place: None,
            flight: None,
            offer: None,
            orphans: Vec::new(),
            todo: Todo::Step(Step::Attempt),
        }
    }

    /// A single attempt (`try_lock`): granted, held, or an error.
    pub(crate) fn once(keys: Keys, settings: &Settings, now: Instant) -> Self {
        let mut machine = Self::new(keys, settings, settings.watchdog, now);
        machine.shape = Shape::Once;
        machine.wait.attempt();
        machine
    }

    /// The machine for a `lock()` (a wait for a grant of `kind` on `name`): the one place
    /// that checks a wait's settings and picks the protocol, queued on the server
    /// ([`fair`](Self::fair)) or by attempts ([`wait`](Self::wait)). `channel` is `Some`
    /// when the handle has release notifications, and gives its handoff channel once they
    /// run (called only for a queued wait); `handover` says whether a release of this
    /// handle can hand it the lock.
    pub(crate) fn for_lock(
        settings: &Settings,
        name: &str,
        kind: Kind,
        watchdog: bool,
        channel: Option<impl FnOnce() -> Option<String>>,
        handover: bool,
        now: Instant,
    ) -> Result<Self, LockError> {
        settings.validate_kind(kind)?;
        settings.validate_wait()?;
        let keys = settings.keys_of(name, kind)?;
        if settings.queued(&keys) {
            Self::fair(keys, settings, watchdog, channel.and_then(|c| c()), now)
        } else {
            let notifications = channel.is_some();
            Ok(Self::wait(
                keys,
                settings,
                watchdog,
                notifications,
                handover,
                now,
            ))
        }
    }

    /// One attempt (`try_lock()`) at a grant of `kind` on `name`.
    pub(crate) fn for_try(
        settings: &Settings,
        name: &str,
        kind: Kind,
        now: Instant,
    ) -> Result<Self, LockError> {
        settings.validate_kind(kind)?;
        Ok(Self::once(settings.keys_of(name, kind)?, settings, now))
    }

    /// A wait until `wait_timeout` by attempts (`lock()`), first come first served among
    /// the handle's waiters; `notifications` says whether it can subscribe to release
    /// notifications, `handover` whether a release of this handle can hand it the lock.
    pub(crate) fn wait(
        keys: Keys,
        settings: &Settings,
        watchdog: bool,
        notifications: bool,
        handover: bool,
        now: Instant,
    ) -> Self {
        let mut machine = Self::new(keys, settings, watchdog, now);
        machine.wait = Wait::new(&machine.keys.name, now, settings, notifications);
        if handover {
            machine.shape = Shape::Offering;
        }
        machine.todo = Todo::Turn;
        machine
    }

    /// A fair wait (see [`crate::machine::fair`]): a ticket in the lock's queue on the server,
    /// renewed while it waits, until the lock is handed to it; `channel` is the
    /// handle's handoff channel when it has notifications.
    pub(crate) fn fair(
        keys: Keys,
        settings: &Settings,
        watchdog: bool,
        channel: Option<String>,
        now: Instant,
    ) -> Result<Self, LockError> {
        let mut machine = Self::new(keys, settings, watchdog, now);
        let claim = fair::claim(settings.ttl, watchdog);
        let letters = channel.is_some();
        let channel = channel.unwrap_or_else(|| "-".to_owned());
        let ticket = Ticket::new(Token::new()?, claim, machine.keys.kind, &channel);
        machine.place = Some(Place {
            ticket,
            unanswered: false,
            claim,
            reading: None,
            channel,
            listened: !letters,
        });
        machine.wait = Wait::new(&machine.keys.name, now, settings, false)
            .queued(letters, fair::REFRESH.min(claim / 2));
        machine.todo = Todo::Enter;
        Ok(machine)
    }

    /// The lock's keys.
    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The fair waiter's ticket.
    pub(crate) fn ticket(&self) -> Option<&Ticket> {
        self.place.as_ref().map(|p| &p.ticket)
    }

    /// What to do next, at `now`.
    pub(crate) fn next(&mut self, now: Instant) -> Next {
        if let Some(orphan) = self.orphans.pop() {
            return Next::Release(orphan);
        }
        match std::mem::replace(&mut self.todo, Todo::Await) {
            Todo::Step(step) => self.step(step, now),
            Todo::Turn => Next::Turn {
                until: self.wait.deadline(),
            },
            Todo::Enter => Next::Enter,
            Todo::Done(next) => next,
            Todo::Await => Next::Done(Err(LockError::InvalidSettings(
                "internal: the lock machine was asked twice without an answer".to_owned(),
            ))),
        }
    }

    fn step(&mut self, step: Step, now: Instant) -> Next {
        match step {
            Step::Attempt => {
                let Some(limit) = self.wait.budget(now) else {
                    let e = self.wait.give_up(now);
                    return self.fail(e, now);
                };
                let token = match &self.place {
                    Some(place) => place.ticket.token.clone(),
                    None => match Token::new() {
                        Ok(token) => token,
                        Err(e) => return self.fail(e, now),
                    },
                };
                self.flight = Some(Flight {
                    token: token.clone(),
                    sent: now,
                    limit,
                    fence: None,
                });
                if self.place.is_some() {
                    Next::Queue { limit }
                } else {
                    Next::Attempt { token, limit }
                }
            }
            Step::Subscribe { within } => Next::Listen {
                within,
                offer: self.stand(),
            },
            Step::Sleep { nap } => {
                let offer = self.stand();
                tracing::trace!(?nap, attempts = self.wait.attempts(), "lock held; waiting");
                Next::Sleep { nap, offer }
            }
            Step::GiveUp(e) => {
                tracing::debug!(attempts = self.wait.attempts(), "lock wait ended: {e}");
                let timeout = matches!(e, LockError::Timeout { .. });
                crate::machine::metrics::acquire_failed(&self.keys.name, timeout);
                self.fail(e, now)
            }
        }
    }

    /// The handover offer to stand from the first refusal on, when none stands yet.
    fn stand(&mut self) -> Option<Token> {
        if self.shape != Shape::Offering || self.offer.is_some() {
            return None;
        }
        self.offer = Token::new().ok();
        self.offer.clone()
    }

    /// Ends with `e`; a fair waiter's place is given up (which passes on a grant made to
    /// it meanwhile).
    fn fail(&mut self, e: LockError, now: Instant) -> Next {
        self.leave_queue(now);
        match self.orphans.pop() {
            Some(orphan) => {
                self.todo = Todo::Done(Next::Done(Err(e)));
                Next::Release(orphan)
            }
            None => Next::Done(Err(e)),
        }
    }

    /// Gives the fair place up: its ticket comes out, with a grant made to it meanwhile.
    fn leave_queue(&mut self, now: Instant) {
        if let Some(place) = self.place.take() {
            self.orphans.push(Abandoned {
                keys: self.keys.clone(),
                token: place.ticket.token.clone(),
                until: now + self.ttl.max(fair::WAITER_LEASE),
                ticket: Some(place.ticket.ticket),
                unanswered: place.unanswered,
            });
        }
    }

    /// A fresh place at the end of the queue, the old one given up.
    fn reenter(&mut self, now: Instant) -> Result<(), LockError> {
        let Some(old) = &self.place else {
            return Ok(());
        };
        let (claim, channel, listened) = (old.claim, old.channel.clone(), old.listened);
        let ticket = Ticket::new(Token::new()?, claim, self.keys.kind, &channel);
        self.leave_queue(now);
        self.place = Some(Place {
            ticket,
            unanswered: false,
            claim,
            reading: None,
            channel,
            listened,
        });
        Ok(())
    }

    /// A grant of the command sent at `sent` may exist: it is released unless claimed.
    /// `unanswered`: the command got no answer, and may still make it after the release.
    fn orphan(&mut self, token: Token, sent: Instant, lease: Duration, unanswered: bool) {
        tracing::debug!(lock = %self.keys.name, "a grant nobody owns is released in the background");
        self.orphans.push(Abandoned {
            keys: self.keys.clone(),
            token,
            until: sent + lease,
            ticket: None,
            unanswered,
        });
    }

    /// The caller's turn came at `now`; `just_granted` says the previous local waiter got
    /// the lock a moment ago while a live subscription stands.
    pub(crate) fn turned(&mut self, just_granted: bool, now: Instant) {
        self.todo = Todo::Step(self.wait.start(now, just_granted));
    }

    /// The turn did not come before the deadline.
    pub(crate) fn no_turn(&mut self, now: Instant) {
        self.todo = Todo::Step(Step::GiveUp(self.wait.give_up(now)));
    }

    /// The fair mailbox is open; `live` says whether its channel is subscribed.
    pub(crate) fn entered(&mut self, live: bool) {
        let within = self.wait_within();
        let listen = self.place.as_mut().is_some_and(|p| {
            let first = !p.listened;
            p.listened = true;
            first && !live
        });
        self.todo = if listen {
            Todo::Step(Step::Subscribe { within })
        } else {
            Todo::Step(self.wait.attempt())
        };
    }

    /// How long the first fair call may wait for the handle's channel to go live.
    fn wait_within(&self) -> Duration {
        self.response_timeout
            .min(self.wait.deadline().saturating_duration_since(self.started))
    }

    /// The subscription asked for is live (or not, after `within`).
    pub(crate) fn listened(&mut self, live: bool) {
        if self.place.is_some() && !live {
            // A handoff published before the channel is live is found by the next
            // renewal; the wait keeps trying to subscribe at its next refusal.
            self.wait.resubscribe();
        }
        self.todo = Todo::Step(self.wait.attempt());
    }

    /// The attempt's reply, read at `now`.
    pub(crate) fn acquired(&mut self, reply: Result<Outcome, LockError>, now: Instant) {
        let Some(flight) = self.flight.take() else {
            return;
        };
        let result = match reply {
            Err(e) => Err(self.failed(&flight, e)),
            Ok(outcome @ Outcome::Granted { fence, .. }) => {
                if outcome.is_late(self.ttl, now) {
                    tracing::debug!(lock = %self.keys.name, "grant arrived after its validity; released");
                    self.orphan(flight.token.clone(), flight.latest_send(), self.ttl, false);
                    Ok(Attempted::Held { remaining: None })
                } else if self.confirm {
                    let left = flight
                        .limit
                        .min(self.response_timeout)
                        .saturating_sub(now.saturating_duration_since(flight.sent))
                        .max(Duration::from_millis(1));
                    let token = flight.token.clone();
                    self.flight = Some(Flight {
                        fence: Some(fence),
                        ..flight
                    });
                    self.todo = Todo::Done(Next::Confirm { token, left });
                    return;
                } else {
                    Ok(self.granted(flight.token, fence, flight.sent))
                }
            }
            Ok(Outcome::Held { remaining }) => Ok(Attempted::Held { remaining }),
            Ok(Outcome::Undone(e)) => {
                tracing::debug!(lock = %self.keys.name, error = %e, "a grant worth nothing; released");
                self.orphan(flight.token.clone(), flight.latest_send(), self.ttl, false);
                Err(e)
            }
        };
        self.attempted(result, now);
    }

    /// A failed command: its grant may exist unless the error proves the script did
    /// not run.
    fn failed(&mut self, flight: &Flight, e: LockError) -> LockError {
        if e.may_have_run() {
            self.orphan(flight.token.clone(), flight.latest_send(), self.ttl, true);
        }
        kind_refused(e, &self.keys)
    }

    fn granted(&self, token: Token, fence: u64, sent: Instant) -> Attempted {
        tracing::debug!(lock = %self.keys.name, fence, "lock acquired");
        let grant = Grant {
            fence,
            sent,
            lease: None,
            attempts: 1,
            handovers: 0,
        };
        Attempted::Granted { token, grant }
    }

    /// The confirmation's reply, read at `now`.
    pub(crate) fn confirmed(&mut self, reply: Result<(), LockError>, now: Instant) {
        let Some(flight) = self.flight.take() else {
            return;
        };
        let fence = flight.fence.unwrap_or_default();
        let result = match reply {
            Err(e) => {
                // The grant exists; it is released whatever the error.
                self.orphan(flight.token.clone(), flight.latest_send(), self.ttl, false);
                Err(e)
            }
            Ok(()) if now >= flight.sent + validity(self.ttl) => {
                tracing::debug!(lock = %self.keys.name, "grant confirmed after its validity; released");
                self.orphan(flight.token.clone(), flight.latest_send(), self.ttl, false);
                Ok(Attempted::Held { remaining: None })
            }
            Ok(()) => Ok(self.granted(flight.token, fence, flight.sent)),
        };
        self.attempted(result, now);
    }

    /// What an attempt's result means: done, or the wait's next step.
    fn attempted(&mut self, result: Result<Attempted, LockError>, now: Instant) {
        if self.shape == Shape::Once {
            self.todo = Todo::Done(match result {
                Ok(Attempted::Granted { token, grant }) => self.done(token, grant),
                Ok(Attempted::Held { .. }) => Next::Done(Ok(None)),
                Err(e) => Next::Done(Err(e)),
            });
            return;
        }
        self.todo = match self.wait.attempted(result, now) {
            Ok(Progress::Granted(token, grant)) => Todo::Done(self.done(token, grant)),
            Ok(Progress::Next(step)) => Todo::Step(step),
            Err(e) => Todo::Step(Step::GiveUp(e)),
        };
    }

    fn done(&mut self, token: Token, grant: Grant) -> Next {
        // The offer is withdrawn by the executor: a handover to it cannot succeed now
        // (the key holds our token), and one that came anyway is released.
        self.offer = None;
        Next::Done(Ok(Some(Granted {
            keys: self.keys.clone(),
            token,
            grant,
            started: self.started,
            watchdog: self.watchdog,
            downgrade: false,
        })))
    }

    /// fair-queue.lua's reply to the queue call, read at `now`.
    pub(crate) fn queued(&mut self, reply: Result<(i64, i64, i64, i64), LockError>, now: Instant) {
        let Some(flight) = self.flight.take() else {
            return;
        };
        let result = match reply {
            Err(e) => {
                if let Some(place) = self.place.as_mut().filter(|_| e.may_have_run()) {
                    place.unanswered = true;
                }
                Err(kind_refused(e, &self.keys))
            }
            Ok(reply) => match Answer::from_reply(reply) {
                Answer::Granted { fence, lease } if now < flight.sent + validity(lease) => {
                    let grant = Grant {
                        fence,
                        sent: flight.sent,
                        lease: Some(lease),
                        attempts: self.wait.attempts(),
                        handovers: 0,
                    };
                    self.claim(grant);
                    return;
                }
                Answer::Granted { .. } => {
                    tracing::debug!(lock = %self.keys.name, "fair grant arrived after its validity; passed on");
                    self.late(now);
                    return;
                }
                Answer::Queued { server_us, pttl } => {
                    if let Some(place) = &mut self.place {
                        place.reading = Some(Reading {
                            sent: flight.sent,
                            server_us,
                        });
                    }
                    Ok(Attempted::Held { remaining: pttl })
                }
            },
        };
        self.attempted(result, now);
    }

    /// The fair grant is this waiter's: its place is claimed.
    fn claim(&mut self, grant: Grant) {
        let Some(place) = self.place.take() else {
            return;
        };
        self.todo = Todo::Done(self.done(place.ticket.token, grant));
    }

    /// A fair grant that came after its validity: the place is given up (which passes it
    /// on) and the waiter queues again.
    fn late(&mut self, now: Instant) {
        self.todo = match self.reenter(now) {
            Ok(()) => Todo::Enter,
            Err(e) => Todo::Step(Step::GiveUp(e)),
        };
    }

    /// The sleep ended with `wake`, at `now`.
    pub(crate) fn woke(&mut self, wake: Wake, now: Instant) {
        match wake {
            Wake::Nap => {}
            Wake::Handed(None) => self.offer = None,
            Wake::Handed(Some(handed)) => {
                let Some(token) = self.offer.take() else {
                    return;
                };
                if now < handed.sent + validity(self.ttl) {
                    tracing::debug!(lock = %self.keys.name, fence = handed.fence, "lock handed over");
                    let grant = Grant {
                        fence: handed.fence,
                        sent: handed.sent,
                        lease: None,
                        attempts: self.wait.attempts(),
                        handovers: handed.streak,
                    };
                    self.todo = Todo::Done(self.done(token, grant));
                    return;
                }
                tracing::debug!(lock = %self.keys.name, "handover arrived after its validity; released");
                self.orphan(token, handed.sent, self.ttl, false);
            }
            Wake::Letter(letter) => {
                let Some(reading) = self.place.as_ref().and_then(|p| p.reading) else {
                    // Not placed on this clock yet: the next call finds the grant.
                    self.todo = Todo::Step(self.wait.attempt());
                    return;
                };
                let grant = letter.grant(reading, self.wait.attempts());
                if now < grant.sent + validity(letter.claim) {
                    tracing::debug!(lock = %self.keys.name, fence = grant.fence, "lock handed over by the queue");
                    self.claim(grant);
                    return;
                }
                tracing::debug!(lock = %self.keys.name, "handoff arrived after its validity; passed on");
                if self.reenter(now).is_ok() {
                    self.todo = Todo::Enter;
                    return;
                }
            }
        }
        self.todo = Todo::Step(self.wait.attempt());
    }

    /// The caller gave up (its future was dropped, or its thread unwound) at `now`:
    /// every grant that may exist without an owner, to release in the background.
    pub(crate) fn abandon(&mut self, now: Instant) -> Vec<Abandoned> {
        if let Some(flight) = self.flight.take() {
            if let Some(place) = &mut self.place {
                place.unanswered = true;
            } else {
                // Awaiting its confirmation, the grant is known to exist.
                let unanswered = flight.fence.is_none();
                self.orphan(
                    flight.token.clone(),
                    flight.latest_send(),
                    self.ttl,
                    unanswered,
                );
            }
        }
        self.leave_queue(now);
        if let Todo::Done(Next::Done(Ok(Some(granted)))) =
            std::mem::replace(&mut self.todo, Todo::Await)
        {
            self.orphan(granted.token, granted.grant.sent, self.ttl, false);
        }
        std::mem::take(&mut self.orphans)
    }
}

/// For the model checker (feature `model`): what tells two acquisitions apart, and a copy
/// for each branch it takes.
#[cfg(feature = "model")]
impl Acquire {
    /// Everything of the acquisition that a later call can depend on, except owner tokens
    /// (drawn at random, they differ between two runs of one history; the model names
    /// them by where they are used; a fair ticket names one). Called between
    /// the model's steps, when [`next`](Self::next) has answered and nothing is left to
    /// do but wait: what is still to do is told by its kind.
    pub(crate) fn digest(&self, state: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        (self.started, self.watchdog, self.confirm, self.shape).hash(state);
        self.wait.digest(state);
        // A fair place, its ticket (which names the owner token) left out.
        let place = self.place.as_ref().map(|p| {
            let reading = p.reading.map(|r| (r.sent, r.server_us));
            (p.unanswered, p.claim, reading, p.listened)
        });
        place.hash(state);
        let flight = self.flight.as_ref().map(|f| (f.sent, f.limit, f.fence));
        flight.hash(state);
        self.offer.is_some().hash(state);
        for orphan in &self.orphans {
            (orphan.until, orphan.unanswered, orphan.ticket.is_some()).hash(state);
        }
        std::mem::discriminant(&self.todo).hash(state);
    }

    /// A copy that goes on alone from here, for the model checker's branches (errors
    /// kept as [`LockError::for_each`] copies them: every one the model feeds is a
    /// `redis` error, copied whole).
    pub(crate) fn fork(&self) -> Self {
        let todo = match &self.todo {
            Todo::Step(step) => Todo::Step(step.fork()),
            Todo::Await => Todo::Await,
            Todo::Enter => Todo::Enter,
            Todo::Turn => Todo::Turn,
            Todo::Done(next) => Todo::Done(next.fork()),
        };
        Self {
            keys: self.keys.clone(),
            wait: self.wait.fork(),
            place: self.place.clone(),
            flight: self.flight.clone(),
            offer: self.offer.clone(),
            orphans: self.orphans.clone(),
            todo,
            ..*self
        }
    }
}

#[cfg(feature = "model")]
impl Next {
    fn fork(&self) -> Self {
        match self {
            Next::Turn { until } => Next::Turn { until: *until },
            Next::Attempt { token, limit } => Next::Attempt {
                token: token.clone(),
                limit: *limit,
            },
            Next::Confirm { token, left } => Next::Confirm {
                token: token.clone(),
                left: *left,
            },
            Next::Enter => Next::Enter,
            Next::Queue { limit } => Next::Queue { limit: *limit },
            Next::Listen { within, offer } => Next::Listen {
                within: *within,
                offer: offer.clone(),
            },
            Next::Sleep { nap, offer } => Next::Sleep {
                nap: *nap,
                offer: offer.clone(),
            },
            Next::Release(abandoned) => Next::Release(abandoned.clone()),
            Next::Done(done) => Next::Done(match done {
                Ok(granted) => Ok(granted.clone()),
                Err(e) => Err(e.for_each()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::key::Kind;
    use crate::machine::retry::RetryPolicy;

    fn settings() -> Settings {
        Settings {
            ttl: Duration::from_secs(1),
            wait_timeout: Duration::from_secs(2),
            retry: RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(80)),
            ..Settings::default()
        }
    }

    fn keys(settings: &Settings) -> Keys {
        settings.keys_of("m", Kind::Lock).unwrap()
    }

    fn io() -> LockError {
        LockError::no_reply(Duration::from_millis(5))
    }

    fn granted(fence: u64, sent: Instant) -> Outcome {
        Outcome::Granted { fence, sent }
    }

    /// A plain wait (`handover`: standing offers) past its turn, at its first attempt.
    fn waiting(s: &Settings, handover: bool, now: Instant) -> (Acquire, Token) {
        let mut m = Acquire::wait(keys(s), s, true, false, handover, now);
        assert!(matches!(m.next(now), Next::Turn { .. }));
        m.turned(false, now);
        let token = attempt(&mut m, now);
        (m, token)
    }

    fn attempt(machine: &mut Acquire, now: Instant) -> Token {
        match machine.next(now) {
            Next::Attempt { token, .. } => token,
            _ => panic!("expected an attempt"),
        }
    }

    #[test]
    fn a_single_try_is_granted_or_held() {
        let s = settings();
        let now = Instant::now();
        let mut m = Acquire::once(keys(&s), &s, now);
        let token = attempt(&mut m, now);
        m.acquired(Ok(granted(4, now)), now);
        let Next::Done(Ok(Some(g))) = m.next(now) else {
            panic!("granted")
        };
        assert_eq!((g.token, g.grant.fence, g.grant.attempts), (token, 4, 1));

        let mut m = Acquire::once(keys(&s), &s, now);
        attempt(&mut m, now);
        m.acquired(Ok(Outcome::Held { remaining: None }), now);
        assert!(matches!(m.next(now), Next::Done(Ok(None))));
    }

    #[test]
    fn a_lost_reply_releases_its_grant_and_a_refusal_does_not() {
        let s = settings();
        let now = Instant::now();
        let mut m = Acquire::once(keys(&s), &s, now);
        let token = attempt(&mut m, now);
        m.acquired(Err(io()), now);
        let Next::Release(a) = m.next(now) else {
            panic!("a reply that may have run leaves a grant to release")
        };
        assert_eq!(a.token, token);
        // The grant may have been made as late as the attempt's bound: a transaction
        // goes after the connection's clock question.
        assert_eq!(a.until, now + s.response_timeout + s.ttl);
        assert!(
            a.unanswered,
            "the attempt may land after its release: it looks again"
        );
        assert!(matches!(m.next(now), Next::Done(Err(LockError::Redis(_)))));

        let mut m = Acquire::once(keys(&s), &s, now);
        attempt(&mut m, now);
        m.acquired(Err(LockError::InvalidSettings("no".into())), now);
        assert!(
            matches!(m.next(now), Next::Done(Err(_))),
            "nothing ran: nothing to release"
        );
    }

    #[test]
    fn a_late_grant_is_released_and_waited_past() {
        let s = settings();
        let now = Instant::now();
        let (mut m, token) = waiting(&s, false, now);
        let late = now + validity(s.ttl);
        m.acquired(Ok(granted(1, now)), late);
        let Next::Release(a) = m.next(late) else {
            panic!("late grant released")
        };
        assert_eq!(a.token, token);
        assert!(!a.unanswered, "answered: the grant is there to find");
        assert!(matches!(m.next(late), Next::Sleep { offer: None, .. }));
        m.woke(Wake::Nap, late);
        let second = attempt(&mut m, late);
        assert_ne!(second, token, "a fresh token per attempt");
    }

    #[test]
    fn a_confirmation_precedes_the_grant_and_a_failed_one_releases_it() {
        let mut s = settings();
        s.wait_for_replicas = Some(crate::machine::settings::ReplicaWait {
            replicas: 1,
            timeout: Duration::from_millis(50),
        });
        let now = Instant::now();
        let mut m = Acquire::once(keys(&s), &s, now);
        let token = attempt(&mut m, now);
        m.acquired(Ok(granted(2, now)), now);
        assert!(matches!(m.next(now), Next::Confirm { token: t, .. } if t == token));
        m.confirmed(Ok(()), now);
        assert!(matches!(m.next(now), Next::Done(Ok(Some(_)))));

        let mut m = Acquire::once(keys(&s), &s, now);
        attempt(&mut m, now);
        m.acquired(Ok(granted(3, now)), now);
        m.next(now);
        m.confirmed(Err(io()), now);
        assert!(matches!(m.next(now), Next::Release(_)));
        assert!(matches!(m.next(now), Next::Done(Err(_))));
    }

    #[test]
    fn a_waiter_stands_one_offer_and_a_handover_grants_it() {
        let s = settings();
        let now = Instant::now();
        let (mut m, _) = waiting(&s, true, now);
        m.acquired(Ok(Outcome::Held { remaining: None }), now);
        let Next::Sleep {
            offer: Some(offer), ..
        } = m.next(now)
        else {
            panic!("an offer with the first sleep")
        };
        m.woke(Wake::Nap, now);
        attempt(&mut m, now);
        m.acquired(Ok(Outcome::Held { remaining: None }), now);
        assert!(
            matches!(m.next(now), Next::Sleep { offer: None, .. }),
            "it still stands"
        );
        let handed = Handover {
            fence: 9,
            sent: now,
            streak: 3,
        };
        m.woke(Wake::Handed(Some(handed)), now);
        let Next::Done(Ok(Some(g))) = m.next(now) else {
            panic!("handed")
        };
        assert_eq!((g.token, g.grant.fence, g.grant.handovers), (offer, 9, 3));
    }

    #[test]
    fn a_late_handover_is_released() {
        let s = settings();
        let now = Instant::now();
        let (mut m, _) = waiting(&s, true, now);
        m.acquired(Ok(Outcome::Held { remaining: None }), now);
        let Next::Sleep {
            offer: Some(offer), ..
        } = m.next(now)
        else {
            panic!("offer")
        };
        let late = now + validity(s.ttl);
        let handed = Handover {
            fence: 9,
            sent: now,
            streak: 1,
        };
        m.woke(Wake::Handed(Some(handed)), late);
        assert!(matches!(m.next(late), Next::Release(a) if a.token == offer));
        assert!(matches!(m.next(late), Next::Attempt { .. }));
    }

    #[test]
    fn a_dropped_wait_releases_what_is_in_flight() {
        let s = settings();
        let now = Instant::now();
        let (mut m, token) = waiting(&s, false, now);
        let orphans = m.abandon(now);
        assert_eq!(orphans.len(), 1);
        assert_eq!(orphans[0].token, token);
        assert!(
            orphans[0].unanswered,
            "the attempt in flight may land later"
        );
    }

    #[test]
    fn a_fair_wait_queues_renews_and_takes_a_handoff() {
        let s = settings();
        let now = Instant::now();
        let mut m = Acquire::fair(keys(&s), &s, true, Some("ch".into()), now).unwrap();
        assert!(matches!(m.next(now), Next::Enter));
        let ticket = m.ticket().unwrap().token.clone();
        m.entered(false);
        assert!(matches!(m.next(now), Next::Listen { .. }));
        m.listened(true);
        assert!(matches!(m.next(now), Next::Queue { .. }));
        m.queued(Ok((0, 0, 500, 1_000_000)), now);
        assert!(matches!(m.next(now), Next::Sleep { offer: None, .. }));
        let letter = Letter {
            token: ticket.as_str().to_owned(),
            fence: 11,
            server_us: 1_010_000,
            claim: Duration::from_secs(1),
        };
        m.woke(Wake::Letter(letter), now + Duration::from_millis(20));
        let Next::Done(Ok(Some(g))) = m.next(now) else {
            panic!("handoff")
        };
        assert_eq!((g.token, g.grant.fence), (ticket, 11));
        assert!(m.abandon(now).is_empty(), "a claimed place is not given up");
    }

    #[test]
    fn a_late_fair_grant_passes_the_place_on_and_queues_again() {
        let s = settings();
        let now = Instant::now();
        let mut m = Acquire::fair(keys(&s), &s, false, None, now).unwrap();
        assert!(matches!(m.next(now), Next::Enter));
        let first = m.ticket().unwrap().ticket.clone();
        m.entered(false);
        assert!(matches!(m.next(now), Next::Queue { .. }));
        let late = now + Duration::from_secs(2);
        m.queued(Ok((1, 5, 1_000, 0)), late);
        let Next::Release(a) = m.next(late) else {
            panic!("the old place is given up")
        };
        assert_eq!(a.ticket.as_deref(), Some(first.as_str()));
        assert!(matches!(m.next(late), Next::Enter));
        assert_ne!(m.ticket().unwrap().ticket, first);
    }

    #[test]
    fn a_fair_wait_that_times_out_gives_its_place_up() {
        let s = settings();
        let now = Instant::now();
        let mut m = Acquire::fair(keys(&s), &s, false, None, now).unwrap();
        m.next(now);
        m.entered(true);
        m.next(now);
        let end = now + s.wait_timeout;
        m.queued(Ok((0, 0, 500, 1)), end);
        assert!(matches!(m.next(end), Next::Release(a) if a.ticket.is_some()));
        assert!(matches!(
            m.next(end),
            Next::Done(Err(LockError::Timeout { .. }))
        ));
    }
}
