//! A multi-lock's rules, as plain state: its names checked and put in the one order
//! every caller takes them in, the groups one call takes at once, what a group's
//! attempt answered, and the wait over all of it (one deadline, one [`Wait`]).
//!
//! - **All or nothing per call.** The names of a group are taken by one call of
//!   acquire-many.lua: every lock free, then all set to one owner token, each name's
//!   counter raised (its own fencing token); otherwise nothing changes and the reply
//!   says which name is held and for how long.
//! - **One call when it can be.** The first attempt sends every name in one group. A
//!   Redis Cluster refuses it when the names live in several slots (`CROSSSLOT`, which
//!   proves nothing ran): from then on the names go one slot at a time.
//! - **No deadlock.** Every caller takes names in the same order: by Cluster slot, then
//!   by name, so one slot's group after another. A caller holds only groups that come
//!   before the one it waits for, so no circle of callers can wait for each other.
//! - **Nothing held on failure.** A grant nobody owns (a lost reply, a late one) is
//!   released in the background with its own token, as for one lock; the groups taken
//!   before a failure are the executor's guards, released before it returns.
//! - **The same wait as one lock.** `try_lock_all` makes one attempt per group;
//!   `lock_all` waits on the held name's release notification or its remaining lease,
//!   with the handle's backoff, until `wait_timeout` (see [`crate::machine::wait`]).

use std::ops::Range;
use std::time::{Duration, Instant};

use crate::LockError;
use crate::machine::grant::{Abandoned, Grant, Granted, wrong_kind};
use crate::machine::key::{Keys, Kind};
use crate::machine::limit::{millis, validity};
use crate::machine::settings::Settings;
use crate::machine::token::Token;
use crate::machine::wait::{Progress, Step, Wait};

/// The most names one multi-lock takes (three keys each in one script call).
pub const MAX_NAMES: usize = 1_000;

/// The Redis Cluster slot of lock `name`: its keys' hash tag is `{name}`.
pub(crate) fn slot(name: &str) -> u16 {
    crate::machine::slots::of_tag(name.as_bytes())
}

/// A multi-lock's names, checked, in the order every caller takes them: by Cluster
/// slot, then by name.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    keys: Vec<Keys>,
    slots: Vec<u16>,
}

impl Names {
    /// The names, checked (each as a lock name; at least one, at most [`MAX_NAMES`],
    /// none twice) and ordered.
    pub(crate) fn new<S: AsRef<str>>(settings: &Settings, names: &[S]) -> Result<Self, LockError> {
        if names.is_empty() || names.len() > MAX_NAMES {
            return Err(LockError::InvalidSettings(format!(
                "a multi-lock takes 1 to {MAX_NAMES} names, not {}",
                names.len()
            )));
        }
        let mut keyed = names
            .iter()
            .map(|name| {
                let name = name.as_ref();
                Ok((slot(name), settings.keys_of(name, Kind::Lock)?))
            })
            .collect::<Result<Vec<_>, LockError>>()?;
        keyed.sort_unstable_by(|(a, x), (b, y)| (a, &x.name).cmp(&(b, &y.name)));
        if let Some(pair) = keyed.windows(2).find(|w| w[0].1.name == w[1].1.name) {
            return Err(LockError::InvalidSettings(format!(
                "the name `{}` is given twice to one multi-lock",
                pair[0].1.name
            )));
        }
        let (slots, keys) = keyed.into_iter().unzip();
        Ok(Self { keys, slots })
    }

    /// The names' keys in order.
    pub(crate) fn keys(&self) -> &[Keys] {
        &self.keys
    }

    /// The groups taken by one call each: all names at once, or (`split`) one group
    /// per slot, in order.
    pub(crate) fn groups(&self, split: bool) -> Vec<Range<usize>> {
        if !split {
            return std::iter::once(0..self.keys.len()).collect();
        }
        let mut groups: Vec<Range<usize>> = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            match groups.last_mut() {
                Some(last) if self.slots[last.start] == *slot => last.end = i + 1,
                _ => groups.push(i..i + 1),
            }
        }
        groups
    }

    /// The names joined, for an error message.
    pub(crate) fn joined(&self) -> String {
        let names: Vec<&str> = self.keys.iter().map(|k| k.name.as_str()).collect();
        names.join(", ")
    }
}

/// The leases of a multi-lock's names, as one: its loss is any name's, its validity the
/// earliest name's. Both faces' `MultiGuard`s answer through it.
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub(crate) struct Held<'a, I: Iterator<Item = &'a crate::Lease> + Clone>(pub(crate) I);

#[cfg(any(feature = "tokio", feature = "blocking"))]
impl<'a, I: Iterator<Item = &'a crate::Lease> + Clone> Held<'a, I> {
    /// The names, in the order they were taken.
    pub(crate) fn names(&self) -> Vec<&'a str> {
        self.0.clone().map(crate::Lease::name).collect()
    }

    /// The fencing token of `name`, if it is one of them.
    pub(crate) fn fencing_token(&self, name: &str) -> Option<u64> {
        (self.0.clone())
            .find(|l| l.name() == name)
            .map(crate::Lease::fencing_token)
    }

    /// Whether any name's lease is known lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.0.clone().any(crate::Lease::is_lost)
    }

    /// Whether any name's lease is suspect.
    pub(crate) fn is_suspect(&self) -> bool {
        self.0.clone().any(crate::Lease::is_suspect)
    }

    /// The earliest validity end (now, for no lease at all).
    pub(crate) fn valid_until(&self) -> Instant {
        (self.0.clone().map(crate::Lease::valid_until).min()).unwrap_or_else(Instant::now)
    }
}

/// What a group's attempt answered (acquire-many.lua's reply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// All taken, with each name's fencing token in order.
    Granted(Vec<u64>),
    /// The `index`-th name of the group (from 0) is held for `remaining` more (unknown
    /// when `None`).
    Held {
        index: usize,
        remaining: Option<Duration>,
    },
}

impl Answer {
    /// Reads `[1, fence...]` or `[0, pttl, i]` for a group of `n` names.
    pub(crate) fn read(reply: &[i64], n: usize) -> Result<Self, LockError> {
        let bad = || {
            LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "an acquire-many reply of the wrong shape",
                format!("{reply:?} for {n} names"),
            )))
        };
        match reply {
            [1, fences @ ..] if fences.len() == n => fences
                .iter()
                .map(|f| u64::try_from(*f).map_err(|_| bad()))
                .collect::<Result<_, _>>()
                .map(Answer::Granted),
            [0, pttl, i] => {
                let index = usize::try_from(*i).ok().filter(|i| (1..=n).contains(i));
                Ok(Answer::Held {
                    index: index.ok_or_else(bad)? - 1,
                    remaining: u64::try_from(*pttl).ok().map(Duration::from_millis),
                })
            }
            _ => Err(bad()),
        }
    }
}

/// What the executor does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Send acquire-many.lua for the group's `keys` with `token` (made here, fresh for
    /// every attempt), bounded by `limit`; answer with [`MultiAcquire::attempted`].
    Attempt {
        group: Range<usize>,
        limit: Duration,
    },
    /// Subscribe to `channel` (the held name's release channel) and wait at most
    /// `within` for it to go live; answer with [`MultiAcquire::resumed`].
    Subscribe { channel: String, within: Duration },
    /// Wait for a release on `channel` or for `nap`; answer with
    /// [`MultiAcquire::resumed`].
    Sleep { channel: String, nap: Duration },
    /// Every group is granted (`true`), or one attempt of `try_lock_all` found a name
    /// held (`false`), or the call fails with this error. Either way but `true`, the
    /// executor releases the groups it holds before it returns.
    Done(Result<bool, LockError>),
}

/// What an attempt's answer leaves to the executor.
#[derive(Default)]
pub(crate) struct Attempted {
    /// The group's grants, one per name, to become guards now (so the watchdog renews
    /// them while later groups are waited for).
    pub(crate) granted: Vec<Granted>,
    /// Grants nobody owns, to release in the background with their own token.
    pub(crate) abandoned: Vec<Abandoned>,
}

/// One `lock_all` or `try_lock_all` call.
pub(crate) struct MultiAcquire {
    names: Names,
    groups: Vec<Range<usize>>,
    split: bool,
    /// The group being taken.
    at: usize,
    /// `None` for `try_lock_all` (one attempt per group).
    wait: Option<Wait>,
    step: Option<Step>,
    /// A try found a name held: the call ends with `Ok(false)`.
    finished: Option<Result<bool, LockError>>,
    /// The attempt in flight: its token and when it was sent.
    sent: Option<(Token, Instant)>,
    /// The name (index into the names) that refused the last attempt.
    blocker: Option<usize>,
    ttl: Duration,
    response_timeout: Duration,
    watchdog: bool,
    started: Instant,
}

impl MultiAcquire {
    /// A call for `names` from `now`: waiting (`lock_all`, with `notifications` when the
    /// handle has them) or one attempt per group; `split` when the handle already knows
    /// its server refuses names of several slots in one call.
    pub(crate) fn new<S: AsRef<str>>(
        settings: &Settings,
        names: &[S],
        wait: bool,
        notifications: bool,
        split: bool,
        now: Instant,
    ) -> Result<Self, LockError> {
        settings.validate()?;
        if wait {
            settings.validate_wait()?;
        }
        if settings.fair {
            return Err(LockError::InvalidSettings(
                "multi-locks do not queue: they are not first come first served; take them \
                 from a handle without fair(true)"
                    .to_owned(),
            ));
        }
        if settings.wait_for_replicas.is_some() {
            return Err(LockError::InvalidSettings(
                "multi-locks do not wait for replicas; take them from a handle without \
                 wait_for_replicas"
                    .to_owned(),
            ));
        }
        let names = Names::new(settings, names)?;
        let mut wait = wait.then(|| Wait::new(&names.joined(), now, settings, notifications));
        let step = wait.as_mut().map_or(Step::Attempt, |w| w.start(now, false));
        Ok(Self {
            groups: names.groups(split),
            names,
            split,
            at: 0,
            wait,
            step: Some(step),
            finished: None,
            sent: None,
            blocker: None,
            ttl: settings.ttl,
            response_timeout: settings.response_timeout,
            watchdog: settings.watchdog,
            started: now,
        })
    }

    /// The names in the order they are taken.
    pub(crate) fn keys(&self) -> &[Keys] {
        self.names.keys()
    }

    /// Whether the server refused names of several slots in one call (the handle
    /// remembers it for its next multi-locks).
    pub(crate) fn split(&self) -> bool {
        self.split
    }

    /// The attempt's owner token and when it went, once [`sending`](Self::sending) made it.
    pub(crate) fn token(&self) -> Option<&Token> {
        self.sent.as_ref().map(|(token, _)| token)
    }

    /// What to do next.
    pub(crate) fn next(&mut self, now: Instant) -> Next {
        if let Some(finished) = self.finished.take() {
            return Next::Done(finished);
        }
        if self.at == self.groups.len() {
            return Next::Done(Ok(true));
        }
        let step = self.step.take().unwrap_or(Step::Attempt);
        let channel = || {
            let blocker = self.blocker.unwrap_or(self.groups[self.at].start);
            self.names.keys[blocker].channel.clone()
        };
        match step {
            Step::Attempt => {
                let limit = match &self.wait {
                    Some(wait) => match wait.budget(now) {
                        Some(limit) => limit,
                        None => return self.give_up(now),
                    },
                    None => self.response_timeout,
                };
                Next::Attempt {
                    group: self.groups[self.at].clone(),
                    limit,
                }
            }
            Step::Subscribe { within } => Next::Subscribe {
                channel: channel(),
                within,
            },
            Step::Sleep { nap } => Next::Sleep {
                channel: channel(),
                nap,
            },
            Step::GiveUp(e) => Next::Done(Err(e)),
        }
    }

    fn give_up(&mut self, now: Instant) -> Next {
        let e = self.wait.as_mut().map_or_else(
            || LockError::InvalidSettings("internal: a try ran out of time".into()),
            |w| w.give_up(now),
        );
        Next::Done(Err(e))
    }

    /// The call for the group about to be sent, with a fresh token, sent at `now`.
    pub(crate) fn sending(
        &mut self,
        settings: &Settings,
        group: &Range<usize>,
        now: Instant,
    ) -> Result<crate::Invocation<Vec<i64>>, LockError> {
        let token = Token::new()?;
        let keys = &self.names.keys[group.clone()];
        let (holders, words): (Vec<String>, Vec<&str>) = (
            keys.iter().map(Keys::holders).collect(),
            Vec::with_capacity(keys.len() * 3),
        );
        let mut words = words;
        for (k, h) in keys.iter().zip(&holders) {
            words.extend([k.lock.as_str(), k.fence.as_str(), h.as_str()]);
        }
        let call = crate::script::builtin::acquire_many(
            &words,
            token.as_str(),
            millis(self.ttl),
            settings.fence_lifetime(self.ttl),
        )
        .delivery(settings.delivery);
        self.sent = Some((token, now));
        Ok(call)
    }

    /// The group's grants that `token` may hold after an unanswered call sent at `sent`.
    fn orphans(&self, group: &Range<usize>, token: &Token, sent: Instant) -> Vec<Abandoned> {
        self.names.keys[group.clone()]
            .iter()
            .map(|keys| Abandoned {
                keys: keys.clone(),
                token: token.clone(),
                until: sent + self.ttl,
                ticket: None,
                unanswered: true,
            })
            .collect()
    }

    /// The attempt's reply, at `now`.
    pub(crate) fn attempted(
        &mut self,
        reply: Result<Vec<i64>, LockError>,
        now: Instant,
    ) -> Attempted {
        let group = self.groups[self.at].clone();
        let Some((token, sent)) = self.sent.take() else {
            return Attempted::default();
        };
        let mut out = Attempted::default();
        let answer = reply.and_then(|r| Answer::read(&r, group.len()));
        let refused = match answer {
            Ok(Answer::Granted(fences)) if now < sent + validity(self.ttl) => {
                let attempts = self.wait.as_ref().map_or(1, Wait::attempts);
                out.granted = (self.names.keys[group.clone()].iter().zip(fences))
                    .map(|(keys, fence)| Granted {
                        keys: keys.clone(),
                        token: token.clone(),
                        grant: Grant {
                            fence,
                            sent,
                            lease: None,
                            attempts,
                            handovers: 0,
                        },
                        started: self.started,
                        watchdog: self.watchdog,
                        downgrade: false,
                    })
                    .collect();
                self.at += 1;
                self.blocker = None;
                if let Some(wait) = &mut self.wait {
                    // The next group's first attempt goes at once.
                    self.step = Some(wait.attempt());
                }
                return out;
            }
            Ok(Answer::Granted(_)) => {
                // A late grant is no grant: released, and counted as refused.
                out.abandoned = self.orphans(&group, &token, sent);
                for a in &mut out.abandoned {
                    a.unanswered = false;
                }
                Ok(None)
            }
            Ok(Answer::Held { index, remaining }) => {
                let blocker = group.start + index;
                if self.blocker.is_some_and(|b| b != blocker)
                    && let Some(wait) = &mut self.wait
                {
                    wait.resubscribe();
                }
                self.blocker = Some(blocker);
                Ok(remaining)
            }
            Err(e) if e.is_cross_slot() && !self.split && self.names.keys.len() > 1 => {
                tracing::debug!("multi-lock names live in several slots: one slot at a time");
                self.split = true;
                self.groups = self.names.groups(true);
                self.step = Some(Step::Attempt);
                return out;
            }
            Err(e) => {
                if e.may_have_run() {
                    out.abandoned = self.orphans(&group, &token, sent);
                }
                Err(self.kind_refused(e, &group))
            }
        };
        let step = match (&mut self.wait, refused) {
            (None, Ok(_)) => {
                self.finished = Some(Ok(false));
                return out;
            }
            (None, Err(e)) => Step::GiveUp(e),
            (Some(wait), Ok(remaining)) => {
                let held = crate::machine::grant::Attempted::Held { remaining };
                Self::progress(wait.attempted(Ok(held), now))
            }
            (Some(wait), Err(e)) => Self::progress(wait.attempted(Err(e), now)),
        };
        self.step = Some(step);
        out
    }

    /// The wait's next step after a refusal or a failure.
    fn progress(progress: Result<Progress, LockError>) -> Step {
        match progress {
            Ok(Progress::Next(step)) => step,
            // Only an answer that grants makes a grant; a refusal never does.
            Ok(Progress::Granted(..)) => Step::Attempt,
            Err(e) => Step::GiveUp(e),
        }
    }

    /// Whether groups granted earlier in this call are held (as guards) by the executor.
    pub(crate) fn holds_groups(&self) -> bool {
        self.at > 0
    }

    /// A group granted earlier in this call is no longer held (its lease was lost while
    /// later groups were waited for: renewals held up, the server forgot it): the executor
    /// releases every group it holds, and the call starts over from the first group within
    /// its wait (a try ends with nothing held). Never `Done(Ok(true))` with a lost name.
    pub(crate) fn lost_held(&mut self) {
        tracing::debug!("a multi-lock's name was lost while later ones were taken: again");
        self.at = 0;
        self.blocker = None;
        self.sent = None;
        match &mut self.wait {
            None => self.finished = Some(Ok(false)),
            Some(wait) => self.step = Some(wait.attempt()),
        }
    }

    /// A subscription went live (or not), or a sleep ended: the next attempt.
    pub(crate) fn resumed(&mut self) {
        if let Some(wait) = &mut self.wait {
            self.step = Some(wait.attempt());
        }
    }

    /// `WRONGKIND` from the script, read as [`LockError::WrongKind`] for the name it names.
    fn kind_refused(&self, e: LockError, group: &Range<usize>) -> LockError {
        if let LockError::Script { message, .. } = &e
            && message.contains("WRONGKIND ")
            && let Some(keys) = self.names.keys[group.clone()]
                .iter()
                .find(|k| message.ends_with(&k.lock))
        {
            return wrong_kind(keys, None);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings::default()
    }

    #[test]
    fn names_go_by_slot_then_name_and_group_by_slot() {
        let names = Names::new(&settings(), &["b", "a", "c", "twin"]).unwrap();
        let order: Vec<(u16, &str)> = (names.keys().iter())
            .map(|k| (slot(&k.name), k.name.as_str()))
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted);
        assert_eq!(names.groups(false), vec![0..4]);
        // Names of one slot form one group.
        let a = slot("a");
        let twin = (0..1_000_000)
            .map(|i| format!("t{i}"))
            .find(|n| slot(n) == a)
            .unwrap();
        let names = Names::new(&settings(), &["a", &twin, "b"]).unwrap();
        let groups = names.groups(true);
        assert_eq!(groups.len(), 2);
        let of_a = groups.iter().find(|g| g.len() == 2).unwrap();
        let together: Vec<&str> = names.keys()[of_a.clone()]
            .iter()
            .map(|k| k.name.as_str())
            .collect();
        assert!(together.contains(&"a") && together.contains(&twin.as_str()));
    }

    #[test]
    fn the_slot_is_the_clusters() {
        // Known slots (CLUSTER KEYSLOT): "foo" 12182, "bar" 5061, "a" 15495.
        assert_eq!(slot("foo"), 12_182);
        assert_eq!(slot("bar"), 5_061);
        assert_eq!(slot("a"), 15_495);
    }

    #[test]
    fn bad_lists_are_refused() {
        let none: [&str; 0] = [];
        assert!(Names::new(&settings(), &none).is_err());
        assert!(Names::new(&settings(), &["a", "b", "a"]).is_err());
        assert!(Names::new(&settings(), &["a", "x}"]).is_err());
        let many: Vec<String> = (0..=MAX_NAMES).map(|i| i.to_string()).collect();
        assert!(Names::new(&settings(), &many).is_err());
    }

    #[test]
    fn replies_are_read_by_shape() {
        assert_eq!(
            Answer::read(&[1, 5, 9], 2).unwrap(),
            Answer::Granted(vec![5, 9])
        );
        assert_eq!(
            Answer::read(&[0, 250, 2], 2).unwrap(),
            Answer::Held {
                index: 1,
                remaining: Some(Duration::from_millis(250))
            }
        );
        assert_eq!(
            Answer::read(&[0, -1, 1], 2).unwrap(),
            Answer::Held {
                index: 0,
                remaining: None
            }
        );
        for bad in [
            &[1, 5][..],
            &[0, 250, 3],
            &[0, 250, 0],
            &[2, 1, 1],
            &[],
            &[1, -5, 1],
        ] {
            assert!(Answer::read(bad, 2).is_err(), "{bad:?}");
        }
    }

    /// Drives a try to its end with `replies`; the steps it took.
    fn run(machine: &mut MultiAcquire, mut replies: Vec<Result<Vec<i64>, LockError>>) -> Next {
        let s = settings();
        for _ in 0..10 {
            let now = Instant::now();
            match machine.next(now) {
                Next::Attempt { group, .. } => {
                    let _call = machine.sending(&s, &group, now).unwrap();
                    machine.attempted(replies.remove(0), Instant::now());
                }
                Next::Subscribe { .. } | Next::Sleep { .. } => machine.resumed(),
                done @ Next::Done(_) => return done,
            }
        }
        panic!("no end in 10 steps");
    }

    #[test]
    fn a_try_ends_on_the_first_held_name_and_a_wait_goes_on() {
        let now = Instant::now();
        let mut try_ =
            MultiAcquire::new(&settings(), &["a", "b"], false, false, false, now).unwrap();
        assert!(matches!(
            run(&mut try_, vec![Ok(vec![0, 10, 2])]),
            Next::Done(Ok(false))
        ));
        let mut try_ =
            MultiAcquire::new(&settings(), &["a", "b"], false, false, false, now).unwrap();
        assert!(matches!(
            run(&mut try_, vec![Ok(vec![1, 3, 4])]),
            Next::Done(Ok(true))
        ));
        let mut wait = MultiAcquire::new(&settings(), &["a", "b"], true, true, false, now).unwrap();
        let replies = vec![Ok(vec![0, 10, 2]), Ok(vec![0, 10, 1]), Ok(vec![1, 3, 4])];
        assert!(matches!(run(&mut wait, replies), Next::Done(Ok(true))));
    }

    #[test]
    fn a_group_lost_midway_starts_the_call_over_and_a_try_ends_with_nothing() {
        let s = settings();
        let now = Instant::now();
        let split = |m: &mut MultiAcquire| {
            m.split = true;
            m.groups = m.names.groups(true);
        };
        let mut wait = MultiAcquire::new(&s, &["a", "b"], true, false, false, now).unwrap();
        split(&mut wait);
        let Next::Attempt { group, .. } = wait.next(now) else {
            panic!("an attempt first")
        };
        let _call = wait.sending(&s, &group, now).unwrap();
        assert_eq!(wait.attempted(Ok(vec![1, 7]), now).granted.len(), 1);
        assert!(wait.holds_groups());
        wait.lost_held();
        assert!(!wait.holds_groups());
        let Next::Attempt { group: again, .. } = wait.next(now) else {
            panic!("the first group again")
        };
        assert_eq!(again, group);

        let mut try_ = MultiAcquire::new(&s, &["a", "b"], false, false, false, now).unwrap();
        split(&mut try_);
        let Next::Attempt { group, .. } = try_.next(now) else {
            panic!("an attempt first")
        };
        let _call = try_.sending(&s, &group, now).unwrap();
        let _ = try_.attempted(Ok(vec![1, 7]), now);
        try_.lost_held();
        assert!(matches!(try_.next(now), Next::Done(Ok(false))));
    }

    #[test]
    fn a_cross_slot_refusal_splits_the_names_by_slot() {
        let now = Instant::now();
        let names = ["a", "b"];
        let mut m = MultiAcquire::new(&settings(), &names, false, false, false, now).unwrap();
        let cross = LockError::CrossSlot {
            script: "acquire-many",
            source: redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot),
                "CROSSSLOT",
            )),
        };
        let replies = vec![Err(cross), Ok(vec![1, 3]), Ok(vec![1, 4])];
        assert!(matches!(run(&mut m, replies), Next::Done(Ok(true))));
        assert!(m.split());
    }

    #[test]
    fn a_lost_reply_leaves_the_group_to_release() {
        let s = settings();
        let now = Instant::now();
        let mut m = MultiAcquire::new(&s, &["a", "b"], false, false, false, now).unwrap();
        let Next::Attempt { group, .. } = m.next(now) else {
            panic!("an attempt first")
        };
        let _call = m.sending(&s, &group, now).unwrap();
        let out = m.attempted(Err(LockError::no_reply(s.response_timeout)), now);
        assert_eq!(out.abandoned.len(), 2);
        assert!(out.abandoned.iter().all(|a| a.unanswered));
        assert!(matches!(m.next(now), Next::Done(Err(_))));
    }
}
