//! Fair mode, as plain rules shared by the async and blocking faces: the waiter's
//! ticket, what fair-queue.lua's replies and handoff messages mean, and how a handoff
//! made on the server's clock becomes a lease on this process's clock.
//!
//! - **One queue per lock, on the server** (`lock:{name}:queue`, by arrival on the
//!   server's clock). Each waiter of every process stands in it with its own ticket
//!   (`<token> <claim_ms> <kind> <channel>`) and renews its deadline every
//!   [`REFRESH`] (at least twice per claim lease) while it waits; a ticket not renewed
//!   for [`WAITER_LEASE`] is dropped.
//! - **Direct handoff.** A release gives the lock to the first live ticket and
//!   publishes `grant <token> <fence> <server_us> <claim_ms>` on that waiter's channel
//!   (its handle's): that waiter alone wakes, holding the lock already.
//! - **The claim lease.** A handed lease is first only `claim` long
//!   ([`claim`]: [`WAITER_LEASE`] with the watchdog on, which renews it to the ttl a
//!   third of the way in), so a waiter that died just before its turn holds the queue
//!   up for that long at most.
//! - **The server's clock, mapped conservatively.** A handoff is stamped with the
//!   server's clock. Each queue call's reply carries the server's clock too; the call
//!   was sent no later than the server read it, so a server instant maps to no later
//!   than `sent + (instant - read)` here, less the drift allowance on the interval.
//!   The lease counts from there: never later than the server started it.

use std::time::{Duration, Instant};

use crate::machine::grant::{Abandoned, Grant, Granted};
use crate::machine::key::Kind;
use crate::machine::lease::LeaseState;
use crate::machine::limit::validity;
use crate::machine::token::Token;

/// How long a waiter's ticket stays in the queue without a renewal: a waiter whose
/// process died is dropped from the queue this long after its last renewal.
pub(crate) const WAITER_LEASE: Duration = Duration::from_secs(2);

/// How often a waiter renews its ticket (and, by the same call, finds a handoff whose
/// message it missed): three times per [`WAITER_LEASE`].
pub(crate) const REFRESH: Duration = Duration::from_millis(666);

/// The lease a handoff gives first: short with the watchdog on (it renews to the ttl
/// at once), the whole ttl without it (nothing would renew it).
pub(crate) fn claim(ttl: Duration, watchdog: bool) -> Duration {
    if watchdog { ttl.min(WAITER_LEASE) } else { ttl }
}

/// A waiter's place in a fair queue.
#[derive(Clone, Debug)]
pub struct Ticket {
    /// The owner token a grant to this waiter carries.
    pub(crate) token: Token,
    /// `<token> <claim_ms> <kind> <channel>`, as fair-queue.lua stores it.
    pub(crate) ticket: String,
}

impl Ticket {
    pub(crate) fn new(token: Token, claim: Duration, kind: Kind, channel: &str) -> Self {
        let ticket = format!(
            "{} {} {} {channel}",
            token.as_str(),
            crate::machine::limit::millis(claim),
            kind.code()
        );
        Self { token, ticket }
    }
}

/// One reading of the server's clock: a call sent at `sent` found it at `server_us`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    pub(crate) sent: Instant,
    pub(crate) server_us: i64,
}

impl Reading {
    /// The latest instant of this process's clock that is surely not after the server's
    /// clock showed `server_us` (clock rates may differ by the drift allowance, 1%).
    pub(crate) fn no_later_than(&self, server_us: i64) -> Instant {
        let apart = Duration::from_micros(server_us.abs_diff(self.server_us));
        if server_us >= self.server_us {
            self.sent + apart.saturating_sub(apart / 100)
        } else {
            self.sent
                .checked_sub(apart + apart / 100)
                .unwrap_or(self.sent)
        }
    }
}

/// What fair-queue.lua's `acquire` answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Granted by this call (`{1, ..}`) or handed before it (`{2, ..}`): the fence, and
    /// the lease left, counted from the call's sending.
    Granted { fence: u64, lease: Duration },
    /// Queued (or renewed); the server's clock then, and the holder's lease left.
    Queued {
        server_us: i64,
        pttl: Option<Duration>,
    },
}

impl Answer {
    pub(crate) fn from_reply((status, fence, ms, server_us): (i64, i64, i64, i64)) -> Self {
        match status {
            1 | 2 if ms > 0 => Answer::Granted {
                fence: u64::try_from(fence).unwrap_or_default(),
                lease: Duration::from_millis(ms.unsigned_abs()),
            },
            _ => Answer::Queued {
                server_us,
                pttl: u64::try_from(ms).ok().map(Duration::from_millis),
            },
        }
    }
}

/// A handoff message: `grant <token> <fence> <server_us> <claim_ms>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Letter {
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) server_us: i64,
    pub(crate) claim: Duration,
}

impl Letter {
    pub(crate) fn parse(payload: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(payload).ok()?;
        let mut words = text.strip_prefix("grant ")?.split(' ');
        let token = words.next()?.to_owned();
        let fence = words.next()?.parse().ok()?;
        let server_us = words.next()?.parse().ok()?;
        let claim = Duration::from_millis(words.next()?.parse().ok()?);
        Some(Self {
            token,
            fence,
            server_us,
            claim,
        })
    }
}

/// A handoff message as the grant it makes.
impl Letter {
    /// The grant this handoff is, given the last reading of the server's clock.
    pub(crate) fn grant(&self, reading: Reading, attempts: u32) -> Grant {
        Grant {
            fence: self.fence,
            sent: reading.no_later_than(self.server_us),
            lease: Some(self.claim),
            attempts,
            handovers: 0,
        }
    }
}

/// The read grant a write lease becomes by a downgrade sent at `sent`: the same token
/// and fencing token, the kind `Read`, a lease of the handle's ttl counted from `sent`.
/// Answered at `now`, after that lease's validity, it is worth nothing (a late grant is
/// no grant): then it comes back as the grant to release in the background.
pub(crate) fn downgraded(
    lease: &LeaseState,
    sent: Instant,
    attempts: u32,
    now: Instant,
) -> Result<Granted, Box<Abandoned>> {
    let mut keys = lease.keys.clone();
    keys.kind = Kind::Read;
    let ttl = lease.settings.ttl;
    if now >= sent + validity(ttl) {
        tracing::debug!(lock = %keys.name, "downgrade answered after its validity; released");
        return Err(Box::new(Abandoned {
            keys,
            token: lease.token.clone(),
            until: sent + ttl,
            ticket: None,
            unanswered: false,
        }));
    }
    let grant = Grant {
        fence: lease.fence,
        sent,
        lease: None,
        attempts,
        handovers: 0,
    };
    Ok(Granted {
        keys,
        token: lease.token.clone(),
        grant,
        started: sent,
        watchdog: lease.renews(),
        downgrade: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handoff_maps_to_no_later_than_the_server_made_it() {
        let sent = Instant::now();
        let reading = Reading {
            sent,
            server_us: 1_000_000,
        };
        // 100 ms after the reading on the server: at most 99 ms after the sending here.
        assert_eq!(
            reading.no_later_than(1_100_000),
            sent + Duration::from_millis(99)
        );
        assert_eq!(reading.no_later_than(1_000_000), sent);
        // Before the reading (a handoff the reading's call already saw).
        let earlier = reading.no_later_than(900_000);
        let expected = sent.checked_sub(Duration::from_millis(101)).unwrap_or(sent);
        assert_eq!(earlier, expected);
    }

    #[test]
    fn answers_read_grants_handoffs_and_queueing() {
        assert_eq!(
            Answer::from_reply((1, 7, 30_000, 5)),
            Answer::Granted {
                fence: 7,
                lease: Duration::from_secs(30)
            }
        );
        assert_eq!(
            Answer::from_reply((2, 8, 1_500, 5)),
            Answer::Granted {
                fence: 8,
                lease: Duration::from_millis(1_500)
            }
        );
        // Handed, but expired in the same instant: not a grant.
        assert_eq!(
            Answer::from_reply((2, 8, -2, 5)),
            Answer::Queued {
                server_us: 5,
                pttl: None
            }
        );
        assert_eq!(
            Answer::from_reply((0, 0, 900, 5)),
            Answer::Queued {
                server_us: 5,
                pttl: Some(Duration::from_millis(900))
            }
        );
    }

    #[test]
    fn the_claim_is_short_only_with_a_watchdog() {
        assert_eq!(claim(Duration::from_secs(30), true), WAITER_LEASE);
        assert_eq!(
            claim(Duration::from_millis(300), true),
            Duration::from_millis(300)
        );
        assert_eq!(
            claim(Duration::from_secs(30), false),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn letters_parse_and_refuse_what_is_not_one() {
        let letter = Letter::parse(b"grant 0a1b 42 1795431634781691 2000").unwrap();
        assert_eq!(letter.token, "0a1b");
        assert_eq!(letter.fence, 42);
        assert_eq!(letter.server_us, 1_795_431_634_781_691);
        assert_eq!(letter.claim, Duration::from_secs(2));
        assert_eq!(Letter::parse(b"released"), None);
        assert_eq!(Letter::parse(b"grant 0a1b x 1 2"), None);
        assert_eq!(Letter::parse(b"grant 0a1b 1 2"), None);
    }
}
