//! The wait loop of `lock()`, as plain state: it decides what to do next; the async and
//! blocking faces carry it out.
//!
//! An attempt that finds the lock held is followed, once, by a subscription to the
//! release notifications (when the handle has them) and an immediate second attempt, so
//! a release between the first attempt and the subscription is not missed. After that
//! the waiter sleeps until the release notification, the holder's remaining lease or
//! its backoff, whichever comes first, and tries again. A transient failure (server
//! unreachable, timeout, failover) is retried the same way. When the deadline passes
//! the waiter gives up with [`LockError::Timeout`], or with the last failure if the
//! last attempt failed, so an unreachable server is reported as such.
//!
//! Every step is bounded by the deadline: `lock()` returns within `wait_timeout` plus
//! the one attempt that may have started just before it.

use std::time::{Duration, Instant};

use crate::LockError;
use crate::machine::grant::{Attempted, Grant};
use crate::machine::retry::{RetryPolicy, past_the_lease};
use crate::machine::settings::Settings;
use crate::machine::token::Token;

/// What the waiter does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Make an attempt.
    Attempt,
    /// Subscribe to the release notifications and wait at most `within` for the
    /// subscription to be confirmed, then attempt.
    Subscribe { within: Duration },
    /// Wait for a release, a handover or `nap`, then attempt.
    Sleep { nap: Duration },
    /// Stop: this is the caller's error.
    GiveUp(LockError),
}

/// Where an attempt leaves the wait.
pub(crate) enum Progress {
    /// Granted: the grant's owner token and how it came about.
    Granted(Token, Grant),
    /// Not yet: the next step.
    Next(Step),
}

/// The state of one `lock()` call.
pub(crate) struct Wait {
    name: String,
    started: Instant,
    deadline: Instant,
    /// One attempt's bound; the wait ends at the deadline plus one of these at the latest.
    response_timeout: Duration,
    policy: RetryPolicy,
    attempts: u32,
    naps: u32,
    /// Notifications can be subscribed to and have not been yet.
    subscribe: bool,
    /// The last attempt failed with this transient error.
    failure: Option<LockError>,
    /// A fair waiter (its ticket in the lock's queue): whether its handoff message can
    /// arrive, and how often it renews its ticket.
    queued: Option<(bool, Duration)>,
}

impl Wait {
    /// A wait for lock `name` from `now` for the settings' `wait_timeout`, paced by
    /// their retry policy; `notifications` tells whether the handle can subscribe to
    /// release notifications.
    pub(crate) fn new(name: &str, now: Instant, settings: &Settings, notifications: bool) -> Self {
        Self {
            name: name.to_owned(),
            started: now,
            deadline: now + settings.wait_timeout,
            response_timeout: settings.response_timeout,
            policy: settings.retry,
            attempts: 0,
            naps: 0,
            subscribe: notifications,
            failure: None,
            queued: None,
        }
    }

    /// The wait of a fair waiter that renews its ticket every `refresh`: refused, it
    /// sleeps until its handoff arrives (when `letters`) or until its ticket is due for
    /// renewal or the holder's lease ends, whichever is first; without `letters` it polls
    /// with the retry policy. A renewal is one call, which also finds a handoff whose
    /// message was missed (see `fair::REFRESH` for the pace).
    pub(crate) fn queued(mut self, letters: bool, refresh: Duration) -> Self {
        self.queued = Some((letters, refresh));
        self
    }

    /// Subscribes again at the next refusal (a fair waiter's channel did not go live).
    pub(crate) fn resubscribe(&mut self) {
        self.subscribe = true;
    }

    /// When the wait ends.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// How long the attempt about to start may take: one response timeout, but never
    /// past the deadline plus one response timeout (after a nap or a subscription that
    /// ended late on a busy machine), so `lock()` keeps its bound. `None` when that end
    /// has passed: then the wait ends with [`give_up`](Self::give_up).
    pub(crate) fn budget(&self, now: Instant) -> Option<Duration> {
        let left = (self.deadline + self.response_timeout).saturating_duration_since(now);
        (!left.is_zero()).then(|| left.min(self.response_timeout))
    }

    /// Acquisition attempts made so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The first step. `just_granted` says the lock was granted to the previous local
    /// waiter a moment ago while a live subscription stands: an attempt now would only
    /// be refused, so the waiter waits for the release first.
    pub(crate) fn start(&mut self, now: Instant, just_granted: bool) -> Step {
        if just_granted {
            self.subscribe = false;
            return self.sleep(now, None);
        }
        self.attempt()
    }

    /// The step after a sleep or a subscription.
    pub(crate) fn attempt(&mut self) -> Step {
        self.attempts += 1;
        Step::Attempt
    }

    /// What an attempt's result means for the wait: the grant, the next step, or (for an
    /// error that would only repeat) the caller's error.
    pub(crate) fn attempted(
        &mut self,
        result: Result<Attempted, LockError>,
        now: Instant,
    ) -> Result<Progress, LockError> {
        match result {
            Ok(Attempted::Granted { token, grant }) => Ok(Progress::Granted(
                token,
                Grant {
                    attempts: self.attempts,
                    ..grant
                },
            )),
            Ok(Attempted::Held { remaining }) => Ok(Progress::Next(self.refused(remaining, now))),
            Err(e) if e.is_transient() => {
                tracing::debug!(error = %e, "attempt failed; retrying within the wait");
                Ok(Progress::Next(self.failed(e, now)))
            }
            Err(e) => Err(e),
        }
    }

    /// The attempt found the lock held, for `remaining` more if known.
    fn refused(&mut self, remaining: Option<Duration>, now: Instant) -> Step {
        self.failure = None;
        // Past the deadline, no step but the end: not even the subscription's extra
        // attempt, which would add a second attempt's time to the call.
        if now >= self.deadline {
            return Step::GiveUp(self.give_up(now));
        }
        if self.subscribe {
            self.subscribe = false;
            let within = self.nap(remaining, now);
            return Step::Subscribe { within };
        }
        if let Some((letters, refresh)) = self.queued {
            let left = self.deadline.saturating_duration_since(now);
            let renewal = if letters {
                refresh
            } else {
                self.policy.nap(self.naps, None, left).min(refresh)
            };
            let holder = remaining.map_or(renewal, past_the_lease);
            self.naps += 1;
            return Step::Sleep {
                nap: renewal.min(holder).min(left),
            };
        }
        self.sleep(now, remaining)
    }

    /// The attempt failed with a transient error.
    fn failed(&mut self, error: LockError, now: Instant) -> Step {
        self.failure = Some(error);
        self.sleep(now, None)
    }

    /// A nap before the next attempt, or the end of the wait at the deadline.
    fn sleep(&mut self, now: Instant, remaining: Option<Duration>) -> Step {
        if now >= self.deadline {
            return Step::GiveUp(self.give_up(now));
        }
        let nap = self.nap(remaining, now);
        self.naps += 1;
        Step::Sleep { nap }
    }

    fn nap(&self, remaining: Option<Duration>, now: Instant) -> Duration {
        self.policy.nap(
            self.naps,
            remaining,
            self.deadline.saturating_duration_since(now),
        )
    }

    /// The error to return: the last transient failure if the last attempt failed, else
    /// a timeout.
    pub(crate) fn give_up(&mut self, now: Instant) -> LockError {
        self.failure.take().unwrap_or_else(|| LockError::Timeout {
            name: self.name.clone(),
            waited: now.saturating_duration_since(self.started),
            attempts: self.attempts,
        })
    }
}

/// For the model checker (feature `model`): what tells two waits apart, and a copy.
#[cfg(feature = "model")]
impl Wait {
    /// Everything of the wait that a later step can depend on (the last failure by its
    /// message). The naps themselves are drawn at random and not kept: the model decides
    /// when a sleeper wakes.
    pub(crate) fn digest(&self, state: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        (self.started, self.deadline, self.attempts, self.naps).hash(state);
        (self.subscribe, self.queued).hash(state);
        self.failure.as_ref().map(ToString::to_string).hash(state);
    }

    /// A copy that goes on alone from here (see `Acquire::fork`).
    pub(crate) fn fork(&self) -> Self {
        Self {
            name: self.name.clone(),
            failure: self.failure.as_ref().map(LockError::for_each),
            ..*self
        }
    }
}

#[cfg(feature = "model")]
impl Step {
    /// A copy of the step (see `Acquire::fork`).
    pub(crate) fn fork(&self) -> Self {
        match self {
            Step::Attempt => Step::Attempt,
            Step::Subscribe { within } => Step::Subscribe { within: *within },
            Step::Sleep { nap } => Step::Sleep { nap: *nap },
            Step::GiveUp(e) => Step::GiveUp(e.for_each()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(notifications: bool) -> (Wait, Instant) {
        let now = Instant::now();
        let settings = Settings {
            wait_timeout: Duration::from_secs(1),
            retry: RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(80)),
            ..Settings::default()
        };
        (Wait::new("w", now, &settings, notifications), now)
    }

    /// An attempt never runs past the deadline plus one response timeout (500 ms), even
    /// when the nap before it ended late.
    #[test]
    fn an_attempts_budget_ends_one_response_timeout_after_the_deadline() {
        let (w, now) = wait(false);
        let rt = Duration::from_millis(500);
        assert_eq!(w.budget(now), Some(rt));
        let late = now + Duration::from_millis(1_200);
        assert_eq!(w.budget(late), Some(Duration::from_millis(300)));
        assert_eq!(w.budget(now + Duration::from_millis(1_500)), None);
        assert_eq!(w.budget(now + Duration::from_secs(5)), None);
    }

    #[test]
    fn a_refusal_subscribes_once_then_attempts_at_once() {
        let (mut w, now) = wait(true);
        assert!(matches!(w.start(now, false), Step::Attempt));
        let step = w.refused(Some(Duration::from_millis(3)), now);
        assert!(
            matches!(step, Step::Subscribe { within } if within <= Duration::from_millis(4)),
            "{step:?}"
        );
        assert!(matches!(w.attempt(), Step::Attempt));
        assert!(matches!(w.refused(None, now), Step::Sleep { .. }));
        assert_eq!(w.attempts(), 2);
    }

    #[test]
    fn naps_follow_the_holders_lease_and_the_deadline() {
        let (mut w, now) = wait(false);
        w.start(now, false);
        // A `PTTL` of 2 ms: the key is gone only once the server's clock is past it.
        let step = w.refused(Some(Duration::from_millis(2)), now);
        assert!(
            matches!(step, Step::Sleep { nap } if nap == Duration::from_millis(3)),
            "{step:?}"
        );
        let late = now + Duration::from_millis(999);
        let step = w.refused(None, late);
        assert!(
            matches!(step, Step::Sleep { nap } if nap <= Duration::from_millis(1)),
            "{step:?}"
        );
    }

    #[test]
    fn the_deadline_gives_up_with_a_timeout_or_the_last_failure() {
        let (mut w, now) = wait(false);
        w.start(now, false);
        let end = now + Duration::from_secs(1);
        let step = w.refused(None, end);
        assert!(
            matches!(step, Step::GiveUp(LockError::Timeout { attempts: 1, .. })),
            "{step:?}"
        );

        let (mut w, now) = wait(false);
        w.start(now, false);
        let end = now + Duration::from_secs(1);
        let step = w.failed(LockError::no_reply(Duration::from_millis(5)), end);
        assert!(
            matches!(step, Step::GiveUp(LockError::Redis(_))),
            "{step:?}"
        );
    }

    #[test]
    fn a_first_refusal_past_the_deadline_ends_the_wait_without_subscribing() {
        // The first attempt began just before the deadline and was refused after it: a
        // second attempt (after subscribing) would take the call a second response
        // timeout past its bound.
        let (mut w, now) = wait(true);
        w.start(now, false);
        let step = w.refused(None, now + Duration::from_millis(1_200));
        assert!(
            matches!(step, Step::GiveUp(LockError::Timeout { attempts: 1, .. })),
            "{step:?}"
        );
    }

    #[test]
    fn a_waiter_behind_a_fresh_grant_sleeps_first() {
        let (mut w, now) = wait(true);
        assert!(matches!(w.start(now, true), Step::Sleep { .. }));
        assert_eq!(w.attempts(), 0);
    }
}
