//! An election's rules, as plain state: an election is the lock of its name, so its
//! leader is the lock's holder and the leader's term is its grant's fencing token. What
//! is added here: the leader's record (proclaim.lua writes it, only while the caller's
//! token holds the lock; leader.lua reads it, only as the current holder's), what a read
//! says, and how long an observer waits before it reads again.
//!
//! - **Never two leaders within the lock's promises.** Leading is holding the lock: the
//!   lock's exclusion is the election's, with the same exception (a leader paused past
//!   its lease), and then the term fences: the new leader's is higher.
//! - **A record is the holder's or nothing.** A record written by an earlier leader is
//!   never read as the current one's: the read compares its token with the lock's.
//! - **Observers are told, not polling.** A proclamation publishes on
//!   `lock:{name}:proclaimed` and a resignation on the release channel; an observer reads
//!   again at each message, at the end of the leader's lease (when a leader that died
//!   without resigning is gone), and at the latest every [`OBSERVE_POLL`] (with live
//!   notifications; otherwise every max backoff of the handle's retry policy).

use std::time::Duration;

use crate::LockError;
use crate::machine::key::Keys;
use crate::machine::retry::past_the_lease;
use crate::machine::settings::Settings;
use crate::machine::token::Token;

/// The longest an observer with live notifications waits before it reads the leader
/// again without a message (a message lost with a dropped connection wakes it anyway).
pub const OBSERVE_POLL: Duration = Duration::from_secs(1);

/// An election's leader, as everyone reads it.
///
/// ```no_run
/// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
/// if let Some(leader) = locks.election("jobs").leader().await? {
///     println!("{} leads in term {}", leader.value, leader.term);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader proclaimed (typically its address).
    pub value: String,
    /// The leader's term: its grant's fencing token, higher than every earlier leader's.
    /// A store that refuses writes below the highest term it has seen refuses a deposed
    /// leader's.
    pub term: u64,
}

/// What one read of the leader found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Nobody holds the lock.
    Nobody,
    /// A leader holds it for `left` more (unknown: `None`) and has not proclaimed yet.
    Unproclaimed { left: Option<Duration> },
    /// The leader, for `left` more.
    Leads {
        leader: Leader,
        left: Option<Duration>,
    },
}

impl Seen {
    /// leader.lua's reply.
    pub(crate) fn read(
        (status, pttl, term, value): (i64, i64, String, String),
    ) -> Result<Self, LockError> {
        let left = u64::try_from(pttl).ok().map(Duration::from_millis);
        match status {
            0 => Ok(Seen::Nobody),
            1 => Ok(Seen::Unproclaimed { left }),
            2 => match term.parse() {
                Ok(term) => Ok(Seen::Leads {
                    leader: Leader { value, term },
                    left,
                }),
                Err(_) => Err(bad_reply(&format!("a term of `{term}`"))),
            },
            other => Err(bad_reply(&format!("status {other}"))),
        }
    }

    /// The leader it names, if one proclaimed.
    pub(crate) fn leader(&self) -> Option<&Leader> {
        match self {
            Seen::Leads { leader, .. } => Some(leader),
            _ => None,
        }
    }

    /// How long an observer that saw this waits for a message before it reads again:
    /// until just past the leader's lease (its end may change the leader without a
    /// message), and at most `poll`.
    pub(crate) fn nap(&self, poll: Duration) -> Duration {
        match self {
            Seen::Nobody => poll,
            Seen::Unproclaimed { left } | Seen::Leads { left, .. } => {
                left.map_or(poll, |l| past_the_lease(l).min(poll))
            }
        }
    }
}

/// Whether the leader of `lease` may proclaim: not once its lease is known lost.
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub(crate) fn may_proclaim(lease: &crate::machine::lease::LeaseState) -> Result<(), LockError> {
    if lease.is_lost() {
        return Err(lease.not_held());
    }
    Ok(())
}

/// What a proclamation's answer means for the leader of `lease`: written while it still
/// leads, or [`LockError::NotHeld`]: the lock is no longer its own (the loss is
/// signalled), or the answer came after its lease's validity end (a leadership known lost
/// is none, however the record was written: `campaign` goes on, as `lock()` refuses a
/// late grant; the chaos checker found a campaign that returned a leadership lost 129 ms
/// before).
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub(crate) fn proclaimed(
    lease: &crate::machine::lease::LeaseState,
    written: bool,
) -> Result<(), LockError> {
    if !written {
        let _ = lease.checked(false);
    }
    if written && !lease.is_lost() {
        return Ok(());
    }
    Err(lease.not_held())
}

/// What an observer returned last, to tell whether a read is news to it: the first read
/// always is; a holder that has not proclaimed yet (it will within one round trip) is
/// news only as the end of the last leader.
#[derive(Debug, Default)]
pub(crate) struct Follow {
    /// `None` before the first change returned.
    last: Option<Change>,
}

/// A change an observer returned: this leader, or nobody.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Change(Option<Leader>);

impl Follow {
    /// Whether `seen` is a change to return; if so it becomes [`current`](Self::current).
    pub(crate) fn saw(&mut self, seen: &Seen) -> bool {
        let now = Change(seen.leader().cloned());
        let news = match (&self.last, seen) {
            (None, Seen::Unproclaimed { .. }) => false,
            (None, _) => true,
            (Some(Change(last)), Seen::Unproclaimed { .. }) => last.is_some(),
            (Some(last), _) => *last != now,
        };
        if news {
            self.last = Some(now);
        }
        news
    }

    /// The leader the last change named (`None`: nobody).
    pub(crate) fn current(&self) -> Option<Leader> {
        self.last.as_ref().and_then(|c| c.0.clone())
    }
}

/// What a Redlock quorum's masters agree on, from each one's read (`None`: no answer):
/// the leader a majority names (with the least lease any of them has left), nobody when a
/// majority says so, and otherwise a leadership in the making or ending (not proclaimed,
/// for how long unknown), which an observer reads again soon.
#[cfg_attr(not(feature = "redlock"), allow(dead_code))]
pub(crate) fn agreed(reads: &[Option<Seen>], quorum: usize) -> Seen {
    let nobody = reads
        .iter()
        .flatten()
        .filter(|s| **s == Seen::Nobody)
        .count();
    if nobody >= quorum {
        return Seen::Nobody;
    }
    for candidate in reads.iter().flatten().filter_map(Seen::leader) {
        let naming: Vec<Option<Duration>> = (reads.iter().flatten())
            .filter_map(|s| match s {
                Seen::Leads { leader, left } if leader == candidate => Some(*left),
                _ => None,
            })
            .collect();
        if naming.len() >= quorum {
            return Seen::Leads {
                leader: candidate.clone(),
                left: naming.into_iter().flatten().min(),
            };
        }
    }
    Seen::Unproclaimed { left: None }
}

fn bad_reply(what: &str) -> LockError {
    LockError::Redis(redis::RedisError::from((
        redis::ErrorKind::Parse,
        "a leader.lua reply that cannot be read",
        what.to_owned(),
    )))
}

/// How often an observer reads without a message: [`OBSERVE_POLL`] with live
/// notifications, the retry policy's largest backoff without them.
pub(crate) fn poll(settings: &Settings, live: bool) -> Duration {
    if live {
        OBSERVE_POLL
    } else {
        settings.retry.max_delay()
    }
}

/// The election scripts' calls, with the handle's ttl arithmetic and delivery.
impl Settings {
    /// proclaim.lua: `token`, leading in `term`, proclaims `value`.
    pub(crate) fn proclaim_call(
        &self,
        keys: &Keys,
        token: &Token,
        term: u64,
        value: &str,
    ) -> crate::Invocation<i64> {
        crate::script::builtin::proclaim(
            &keys.lock,
            &keys.leader(),
            token.as_str(),
            term,
            value,
            self.fence_lifetime(self.ttl),
        )
        .delivery(self.delivery)
    }

    /// leader.lua: who leads the election of `keys`.
    pub(crate) fn leader_call(&self, keys: &Keys) -> crate::Invocation<(i64, i64, String, String)> {
        crate::script::builtin::leader(&keys.lock, &keys.leader()).delivery(self.delivery)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: i64, pttl: i64, term: &str, value: &str) -> (i64, i64, String, String) {
        (status, pttl, term.to_owned(), value.to_owned())
    }

    #[test]
    fn reads_say_who_leads() {
        assert_eq!(Seen::read(reply(0, -2, "", "")).unwrap(), Seen::Nobody);
        assert_eq!(
            Seen::read(reply(1, 900, "", "")).unwrap(),
            Seen::Unproclaimed {
                left: Some(Duration::from_millis(900))
            }
        );
        let seen = Seen::read(reply(2, 900, "1795872809948814", "10.0.0.7:80")).unwrap();
        assert_eq!(
            seen.leader(),
            Some(&Leader {
                value: "10.0.0.7:80".into(),
                term: 1_795_872_809_948_814
            })
        );
        assert!(Seen::read(reply(2, 900, "x", "v")).is_err());
        assert!(Seen::read(reply(3, 900, "", "")).is_err());
    }

    #[test]
    fn an_observer_is_told_each_change_once() {
        let leads = |term| Seen::Leads {
            leader: Leader {
                value: "v".into(),
                term,
            },
            left: None,
        };
        let coming = Seen::Unproclaimed { left: None };
        let mut follow = Follow::default();
        assert!(
            !follow.saw(&coming),
            "nothing yet: wait for the proclamation"
        );
        assert!(follow.saw(&leads(5)) && follow.current().unwrap().term == 5);
        assert!(!follow.saw(&leads(5)));
        assert!(follow.saw(&coming), "the last leader is gone");
        assert_eq!(follow.current(), None);
        assert!(!follow.saw(&Seen::Nobody) && !follow.saw(&coming));
        assert!(follow.saw(&leads(6)));
        let mut first = Follow::default();
        assert!(first.saw(&Seen::Nobody) && first.current().is_none());
    }

    #[test]
    fn a_quorum_agrees_on_a_majoritys_reading() {
        let leads = |term, ms| Seen::Leads {
            leader: Leader {
                value: "v".into(),
                term,
            },
            left: Some(Duration::from_millis(ms)),
        };
        let agreed2 = |reads: &[Option<Seen>]| agreed(reads, 2);
        assert_eq!(
            agreed2(&[Some(leads(5, 900)), Some(leads(5, 700)), None]),
            leads(5, 700)
        );
        assert_eq!(
            agreed2(&[Some(Seen::Nobody), None, Some(Seen::Nobody)]),
            Seen::Nobody
        );
        // Two terms, one master each, and one says nobody: no majority.
        assert_eq!(
            agreed2(&[Some(leads(5, 900)), Some(leads(6, 900)), Some(Seen::Nobody)]),
            Seen::Unproclaimed { left: None }
        );
    }

    #[test]
    fn an_observer_reads_again_just_past_the_lease_or_at_the_poll() {
        let poll = Duration::from_secs(1);
        assert_eq!(Seen::Nobody.nap(poll), poll);
        let soon = Seen::Unproclaimed {
            left: Some(Duration::from_millis(200)),
        };
        assert!(soon.nap(poll) > Duration::from_millis(200) && soon.nap(poll) < poll);
        let later = Seen::Unproclaimed {
            left: Some(Duration::from_secs(20)),
        };
        assert_eq!(later.nap(poll), poll);
        assert_eq!(Seen::Unproclaimed { left: None }.nap(poll), poll);
    }
}
