//! The grant protocol, as plain rules shared by every face: what an attempt's reply
//! means, when a grant is worth nothing, and what happens to a grant nobody owns.
//!
//! - **A fresh owner token for every attempt.** A grant that nobody will own (its reply
//!   was lost, came after its validity, or its `lock()` was cancelled) is released in the
//!   background with *its own* token, which no later attempt uses: a background release
//!   can never delete a later grant.
//! - **Nothing orphaned.** Until a reply proves the script did not run (a server error
//!   reply: the scripts change nothing when they fail) or the grant is claimed by a guard,
//!   a [`Pending`] marker stands armed; dropped armed, it hands the grant to the face's
//!   background releaser, which retries compare-and-delete until the grant's TTL ends.
//! - **A background release comes after the command it undoes.** A command that got no
//!   answer (a timeout, a reset, a dropped call) may still reach the server after any
//!   later one: on a pool, or after a reconnect, the release goes on another connection
//!   and may run first. So a release of such a grant that finds nothing does not
//!   conclude there is nothing to release: it looks again, backing off, until the
//!   grant's TTL has passed since the command was sent (see [`Abandoned::released`]).
//! - **A late grant is no grant.** A grant whose reply arrives after its validity end
//!   (counted from before the command was sent) is released and counts as refused.

use std::time::{Duration, Instant};

use crate::LockError;
use crate::machine::key::Keys;
use crate::machine::limit::validity;
use crate::machine::reply::Acquired;
use crate::machine::token::Token;

/// What one attempt got.
#[derive(Debug)]
pub enum Outcome {
    /// Granted with this fencing token; the lease counts from `sent`.
    Granted { fence: u64, sent: Instant },
    /// Held by another owner for `remaining` more (unknown when `None`).
    Held { remaining: Option<Duration> },
    /// Granted, but worth nothing for the reason the error gives (another kind holds
    /// the name, a broken counter): the grant is released in the background and the
    /// attempt fails with the error. Only the acquire transaction answers this (see
    /// [`crate::machine::transact`]); the script undoes its grant itself.
    Undone(LockError),
}

impl Outcome {
    /// Reads an acquire call's reply `{1, fence}` or `{0, pttl}` (see [`Acquired`]).
    pub(crate) fn from_reply(Acquired(acquired, value): Acquired, sent: Instant) -> Self {
        if acquired == 1 {
            Outcome::Granted {
                fence: u64::try_from(value).unwrap_or_default(),
                sent,
            }
        } else {
            Outcome::Held {
                remaining: u64::try_from(value).ok().map(Duration::from_millis),
            }
        }
    }

    /// A grant whose reply came at `now`, after its validity end, is worth nothing.
    pub(crate) fn is_late(&self, ttl: Duration, now: Instant) -> bool {
        matches!(self, Outcome::Granted { sent, .. } if now >= *sent + validity(ttl))
    }
}

/// One attempt's result, with the grant's owner token when granted.
pub(crate) enum Attempted {
    /// Granted to `token`; `grant` counts this one attempt.
    Granted {
        token: Token,
        grant: Grant,
    },
    Held {
        remaining: Option<Duration>,
    },
}

/// How a guard's grant came about.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    pub(crate) fence: u64,
    /// When the granting command (acquire or handover) was sent: the lease counts from
    /// here (for a fair handoff, the earliest instant the release may have run).
    pub(crate) sent: Instant,
    /// The lease granted, when not the handle's ttl (a fair handoff's claim lease, or
    /// what was left of one).
    pub(crate) lease: Option<Duration>,
    /// This caller's acquire attempts.
    pub(crate) attempts: u32,
    /// Handovers in a row that led to this grant (0: acquired by an attempt).
    pub(crate) handovers: u32,
}

/// A grant made to a caller, before it becomes a guard.
#[derive(Clone)]
pub(crate) struct Granted {
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    pub(crate) grant: Grant,
    /// When the caller's call began.
    pub(crate) started: Instant,
    /// Whether the watchdog renews the lease.
    pub(crate) watchdog: bool,
    /// The read grant a downgrade made of a write lease: it continues that lease's
    /// acquisition and is not counted as one of its own.
    pub(crate) downgrade: bool,
}

/// A grant that nobody owns, to be released in the background with its own token.
#[derive(Clone, Debug)]
pub struct Abandoned {
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    /// After this the server has expired the grant by itself: stop trying.
    pub(crate) until: Instant,
    /// A fair waiter's ticket, to take out of the lock's queue too.
    pub(crate) ticket: Option<String>,
    /// The command that may have made the grant got no answer: it may still reach the
    /// server after the release (on another connection of a pool, or after a reconnect),
    /// so a release that finds nothing looks again until `until`.
    pub(crate) unanswered: bool,
}

impl Abandoned {
    /// When to try again after `failures` failed releases, the last sent at `sent`, or
    /// `None` when the TTL frees the lock before then anyway. The retries back off from
    /// 50 ms to a second; for an unanswered command the last one is sent at `until` or
    /// later, so that it runs after any grant the command made by then: a try sent
    /// before `until` proves nothing of a grant made after it ran, however late its
    /// answer comes (the model checker found the release that stopped on such an answer).
    pub(crate) fn next_try(&self, failures: u32, sent: Instant, now: Instant) -> Option<Instant> {
        let delay = Duration::from_millis(50)
            .saturating_mul(1 << failures.min(5))
            .min(Duration::from_secs(1));
        let at = now + delay;
        let last_look_sent = sent >= self.until
            || (crate::machine::mutants::last_look_by_its_answer() && now >= self.until);
        if at < self.until {
            Some(at)
        } else {
            (self.unanswered && !last_look_sent).then_some(self.until.max(now))
        }
    }

    /// A background release of this grant, sent at `sent`, answered `reply` at `now`
    /// after `failures` failed tries: when to try again, or `None` when it is over
    /// (logged and counted here).
    /// It tries again after a transient error, and after finding nothing to release
    /// when the command that may have made the grant got no answer (it may land after
    /// this release), while the TTL has not freed the lock anyway.
    pub(crate) fn released(
        &self,
        reply: Result<bool, &LockError>,
        failures: u32,
        sent: Instant,
        now: Instant,
    ) -> Option<Instant> {
        let retry = match reply {
            Err(e) if e.is_transient() => self.next_try(failures, sent, now),
            Ok(false)
                if self.unanswered
                    && !crate::machine::mutants::orphan_release_stops_at_nothing() =>
            {
                self.next_try(failures, sent, now)
            }
            _ => None,
        };
        if retry.is_none() {
            let lock = &self.keys.name;
            match reply {
                Ok(released) => tracing::debug!(%lock, released, "released in the background"),
                Err(error) => {
                    tracing::debug!(%lock, %error, "background release failed; the ttl frees it");
                }
            }
            crate::machine::metrics::background_release(lock, reply.map_err(|_| ()));
        }
        retry
    }
}

/// An attempt's error, with the scripts' `WRONGKIND` refusal (one name, one kind: see
/// acquire-with-retry.lua and fair-queue.lua) read as [`LockError::WrongKind`].
pub(crate) fn kind_refused(e: LockError, keys: &Keys) -> LockError {
    let LockError::Script { message, .. } = &e else {
        return e;
    };
    let Some(at) = message.find("WRONGKIND ") else {
        return e;
    };
    let held = message[at + "WRONGKIND ".len()..].split([' ', ':']).next();
    wrong_kind(keys, held)
}

/// [`LockError::WrongKind`] for a grant of `keys` refused while another kind holds the
/// name: `held` is `r` for readers, `p` for permits, `None` when not known.
pub(crate) fn wrong_kind(keys: &Keys, held: Option<&str>) -> LockError {
    let held = match held {
        Some("r") => "a read/write lock's readers",
        Some("p") => "a semaphore's permits",
        _ => "a read/write lock's readers or a semaphore's permits",
    };
    LockError::WrongKind {
        name: keys.name.clone(),
        held,
        wanted: keys.kind.noun(),
    }
}

/// A grant that may exist on the server without an owner: armed until
/// [`disarm`](Self::disarm) says otherwise; dropped armed (its command got no answer), it
/// gives the grant to `release`.
pub(crate) struct Pending<'a, R: FnOnce(Abandoned)> {
    keys: &'a Keys,
    token: &'a Token,
    until: Instant,
    release: Option<R>,
}

impl<'a, R: FnOnce(Abandoned)> Pending<'a, R> {
    /// Arms the marker for the grant of `token`, sent at `sent` for `ttl`.
    pub(crate) fn new(
        keys: &'a Keys,
        token: &'a Token,
        sent: Instant,
        ttl: Duration,
        release: R,
    ) -> Self {
        Self {
            keys,
            token,
            until: sent + ttl,
            release: Some(release),
        }
    }

    /// Nothing to release: the grant did not happen, or it has an owner now.
    pub(crate) fn disarm(&mut self) {
        self.release = None;
    }
}

impl<R: FnOnce(Abandoned)> Drop for Pending<'_, R> {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            tracing::debug!(lock = %self.keys.name, "a grant nobody owns is released in the background");
            release(Abandoned {
                keys: self.keys.clone(),
                token: self.token.clone(),
                until: self.until,
                ticket: None,
                unanswered: true,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::machine::settings::Settings;

    #[test]
    fn replies_read_as_grants_or_holds() {
        let sent = Instant::now();
        assert!(matches!(
            Outcome::from_reply(Acquired(1, 5), sent),
            Outcome::Granted { fence: 5, .. }
        ));
        assert!(matches!(
            Outcome::from_reply(Acquired(0, 250), sent),
            Outcome::Held { remaining: Some(d) } if d == Duration::from_millis(250)
        ));
        assert!(matches!(
            Outcome::from_reply(Acquired(0, -1), sent),
            Outcome::Held { remaining: None }
        ));
    }

    #[test]
    fn a_grant_after_its_validity_is_late() {
        let sent = Instant::now();
        let ttl = Duration::from_millis(100);
        let granted = Outcome::Granted { fence: 1, sent };
        assert!(!granted.is_late(ttl, sent + Duration::from_millis(96)));
        assert!(granted.is_late(ttl, sent + validity(ttl)));
    }

    /// A grant of lock `x` nobody owns, freed by its TTL at `until`; `unanswered`: the
    /// command that made it got no answer.
    fn abandoned(until: Instant, unanswered: bool) -> Abandoned {
        Abandoned {
            keys: Settings::default().keys("x").unwrap(),
            token: Token::new().unwrap(),
            until,
            ticket: None,
            unanswered,
        }
    }

    #[test]
    fn a_background_release_retries_transient_errors_until_the_ttl_frees_the_lock() {
        let now = Instant::now();
        let abandoned = abandoned(now + Duration::from_millis(120), false);
        let timeout = LockError::no_reply(Duration::from_millis(5));
        let refused = LockError::InvalidSettings("refused".to_owned());
        let first = abandoned.released(Err(&timeout), 0, now, now);
        assert_eq!(
            first,
            Some(now + Duration::from_millis(50)),
            "a transient error: again"
        );
        assert_eq!(
            abandoned.released(Err(&timeout), 1, now, now),
            Some(now + Duration::from_millis(100))
        );
        assert_eq!(
            abandoned.released(Err(&timeout), 2, now, now),
            None,
            "past the ttl: given up"
        );
        assert_eq!(
            abandoned.released(Err(&refused), 0, now, now),
            None,
            "a refusal: given up"
        );
        assert_eq!(
            abandoned.released(Ok(false), 0, now, now),
            None,
            "answered: done"
        );
    }

    #[test]
    fn the_last_look_is_a_try_sent_at_the_ttls_end_whenever_earlier_answers_come() {
        // Found by the model checker: a try sent before the end ran before the delayed
        // attempt, and its "nothing" came back only at the end.
        let now = Instant::now();
        let abandoned = abandoned(now + Duration::from_millis(300), true);
        let sent = now + Duration::from_millis(200);
        let answered = now + Duration::from_millis(300);
        assert_eq!(
            abandoned.released(Ok(false), 3, sent, answered),
            Some(answered),
            "sent before the end: one more look, now"
        );
        let later = answered + Duration::from_millis(5);
        assert_eq!(
            abandoned.released(Ok(false), 4, answered, later),
            None,
            "sent at the end: it ran after any grant made by then"
        );
    }

    #[test]
    fn a_release_of_an_unanswered_attempt_that_finds_nothing_looks_again_until_its_ttl() {
        // Issue 37, defect 6: the attempt timed out on a slow connection of a pool; its
        // release went on another one and ran first. Nothing found proves nothing while
        // the attempt may still land.
        let now = Instant::now();
        let abandoned = abandoned(now + Duration::from_millis(500), true);
        assert_eq!(
            abandoned.released(Ok(false), 0, now, now),
            Some(now + Duration::from_millis(50)),
            "nothing yet: again"
        );
        assert_eq!(
            abandoned.released(Ok(false), 3, now, now),
            Some(now + Duration::from_millis(400))
        );
        assert_eq!(
            abandoned.released(Ok(false), 4, now, now),
            Some(abandoned.until),
            "the last look is at the ttl's end"
        );
        assert_eq!(
            abandoned.released(Ok(false), 4, abandoned.until, abandoned.until),
            None,
            "sent at the ttl's end: nothing it made is left"
        );
        assert_eq!(
            abandoned.released(Ok(true), 0, now, now),
            None,
            "found and released: done"
        );
    }

    #[test]
    fn the_marker_releases_unless_disarmed() {
        let keys = Settings::default().keys("x").unwrap();
        let token = Token::new().unwrap();
        let released = Cell::new(0);
        let sent = Instant::now();
        let release = |a: Abandoned| {
            assert_eq!(a.token, token);
            released.set(released.get() + 1);
        };
        drop(Pending::new(
            &keys,
            &token,
            sent,
            Duration::from_secs(1),
            release,
        ));
        assert_eq!(released.get(), 1, "dropped armed: released");
        let mut p = Pending::new(&keys, &token, sent, Duration::from_secs(1), release);
        p.disarm();
        drop(p);
        assert_eq!(released.get(), 1, "disarmed: nothing to release");
    }

    #[test]
    fn background_releases_stop_at_the_ttl() {
        let now = Instant::now();
        let a = abandoned(now + Duration::from_millis(300), false);
        assert_eq!(
            a.next_try(0, now, now),
            Some(now + Duration::from_millis(50))
        );
        assert_eq!(
            a.next_try(2, now, now),
            Some(now + Duration::from_millis(200))
        );
        assert_eq!(a.next_try(3, now, now), None);
    }
}
