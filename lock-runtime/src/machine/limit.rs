//! The limits of every setting and input, their safe defaults, and the drift rule of a
//! lease's validity.

use std::time::Duration;

use crate::LockError;

/// The longest lease a lock may ask for: one day. With the watchdog on, a lease only
/// needs to outlast a renewal interval; a longer one only makes a crashed holder block
/// everyone for longer.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The shortest lease: 10 ms. Below that, a lease can run out during one round trip
/// plus scheduling noise, and the holder never gets to use it.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// The longest lock name, in bytes. Key names are kept small: Redis stores them in
/// every command and every reply.
pub const MAX_NAME_LEN: usize = 512;

/// How long `lock()` may wait at most: one day, like [`MAX_TTL`].
pub const MAX_WAIT: Duration = MAX_TTL;

/// The longest `max_hold` cap: 365 days. Anything longer is no cap at all; leave
/// `max_hold` unset instead.
pub const MAX_HOLD: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// How long a lock's fencing counter outlives its last grant unless set: one hour.
/// Then the idle counter expires and the name costs no memory; the next grant
/// restarts the counter from the server's clock in microseconds, above every token
/// given before as long as that clock has not stepped back by more than the time
/// the counter was idle (see `fence_retention`).
pub const DEFAULT_FENCE_RETENTION: Duration = Duration::from_secs(60 * 60);

/// The accepted fence retentions: 1 ms ..= 365 days.
pub const FENCE_RETENTION_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=MAX_HOLD;

/// The longest retry backoff: one hour.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(60 * 60);

/// The response timeout unless set: 500 ms, as redis-rs's own. No lock command does
/// more than a few key reads and writes; a server that takes longer is paused,
/// unreachable or overloaded.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

#[cfg(feature = "redlock")]
/// The Redlock per-node timeout unless set: 50 ms, far below any useful TTL, as the
/// Redlock description advises (5-50 ms for a 10 s TTL).
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// The accepted response timeouts: 1 ms ..= 60 s.
pub const RESPONSE_TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(60);

/// Refuses a duration setting outside its accepted range.
pub(crate) fn check_range(
    setting: &str,
    value: Duration,
    range: &std::ops::RangeInclusive<Duration>,
) -> Result<(), LockError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(LockError::InvalidSettings(format!(
        "{setting} {value:?} is outside {:?}..={:?}",
        range.start(),
        range.end()
    )))
}

/// Refuses a lease the server could not honour or that would be unsafe.
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), LockError> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(LockError::InvalidTtl {
            ttl,
            min: MIN_TTL,
            max: MAX_TTL,
        });
    }
    Ok(())
}

pub(crate) fn check_name(name: &str) -> Result<(), LockError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_NAME_LEN {
        "it is longer than 512 bytes"
    } else if name.contains(['{', '}']) {
        "it contains a brace, which would break the hash tag that keeps its keys in one slot"
    } else {
        return Ok(());
    };
    Err(LockError::InvalidName {
        name: name.chars().take(64).collect(),
        reason,
    })
}

/// The lease a holder may count on: the TTL minus an allowance for clock drift between
/// this process and the server (1% + 2 ms, as the Redlock analysis uses), measured
/// from before the command was sent.
pub(crate) fn validity(ttl: Duration) -> Duration {
    let drift = ttl / 100 + Duration::from_millis(2);
    ttl.saturating_sub(drift)
}

/// Milliseconds for PX/PEXPIRE; `ttl` is already within [`MAX_TTL`].
pub(crate) fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_limits_are_enforced() {
        assert!(check_ttl(Duration::ZERO).is_err());
        assert!(check_ttl(Duration::from_millis(9)).is_err());
        assert!(check_ttl(MIN_TTL).is_ok());
        assert!(check_ttl(MAX_TTL).is_ok());
        assert!(check_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn validity_never_underflows() {
        assert_eq!(validity(Duration::from_millis(1)), Duration::ZERO);
        assert_eq!(
            validity(Duration::from_secs(10)),
            Duration::from_millis(9_898)
        );
    }
}
