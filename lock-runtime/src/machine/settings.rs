//! The settings of a handle, their safe defaults, and their checks.

use std::sync::Arc;
use std::time::Duration;

use crate::LockError;
use crate::machine::key::{Keys, Kind};
#[cfg(feature = "redlock")]
use crate::machine::limit::DEFAULT_NODE_TIMEOUT;
use crate::machine::limit::{
    DEFAULT_FENCE_RETENTION, DEFAULT_RESPONSE_TIMEOUT, FENCE_RETENTION_RANGE, MAX_HOLD,
    MAX_RETRY_DELAY, MAX_WAIT, RESPONSE_TIMEOUT_RANGE, check_range, check_ttl, millis,
};
use crate::machine::retry::RetryPolicy;

/// Everything a [`Locks`](crate::Locks) handle is configured with.
#[derive(Clone, Debug)]
pub struct Settings {
    pub(crate) ttl: Duration,
    pub(crate) wait_timeout: Duration,
    pub(crate) watchdog: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) prefix: Arc<str>,
    pub(crate) retry: RetryPolicy,
    /// `WAIT` after each grant (`Locks::wait_for_replicas`, `blocking::Locks` too).
    pub(crate) wait_for_replicas: Option<ReplicaWait>,
    /// How long one command may wait for its reply.
    pub(crate) response_timeout: Duration,
    /// How long the fencing counter outlives a grant's lease.
    pub(crate) fence_retention: Duration,
    /// EVALSHA or FCALL.
    pub(crate) delivery: crate::Delivery,
    /// Fair mode: one queue per lock on the server, direct handoff.
    pub(crate) fair: bool,
    /// A plain lock's renewals and releases use the server's own commands where it
    /// offers them (`SET … IFEQ`, `DELIFEQ`, `DELEX … IFEQ`); off: always the scripts.
    pub(crate) native: bool,
    /// Redlock: how long one master may take per round.
    #[cfg(feature = "redlock")]
    pub(crate) node_timeout: Duration,
}

/// How many replicas must acknowledge a grant, and how long to wait for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: usize,
    pub(crate) timeout: Duration,
}

/// The defaults, each chosen to be safe in production:
/// - `ttl` 30 s: long enough to ride out a GC pause or a slow renewal, short enough
///   that a crashed holder frees the lock within half a minute;
/// - `wait_timeout` 10 s: `lock()` gives up and says so instead of hanging;
/// - `watchdog` on: the lease is renewed every ttl/3 while the guard lives, so work
///   that runs long does not silently lose its lock; loss is signalled by `lost()`;
/// - no cap on the total hold time (`max_hold`);
/// - key prefix `lock:`;
/// - no `WAIT` for replicas after a grant (`wait_for_replicas`);
/// - response timeout 500 ms: no call hangs on a paused or unreachable server;
/// - fence retention 1 hour: an idle lock name's counter expires, and the clock it
///   restarts from may step back by up to that much without repeating a token;
/// - scripts delivered by EVALSHA (`delivery`);
/// - not fair (`fair`): a release wakes waiters and the first to ask wins;
/// - native renewals and releases where the server offers them (`native_commands`):
///   the same meaning as the scripts at a fraction of the server's time;
/// - Redlock node timeout 50 ms.
impl Default for Settings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(30),
            wait_timeout: Duration::from_secs(10),
            watchdog: true,
            max_hold: None,
            prefix: Arc::from("lock:"),
            retry: RetryPolicy::default(),
            wait_for_replicas: None,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            fence_retention: DEFAULT_FENCE_RETENTION,
            delivery: crate::Delivery::Scripts,
            fair: false,
            native: true,
            #[cfg(feature = "redlock")]
            node_timeout: DEFAULT_NODE_TIMEOUT,
        }
    }
}

impl Settings {
    /// Checks everything a single attempt depends on.
    pub(crate) fn validate(&self) -> Result<(), LockError> {
        check_ttl(self.ttl)?;
        if self.prefix.contains(['{', '}']) {
            return Err(LockError::InvalidSettings(format!(
                "key prefix `{}` contains a brace: the lock's keys share the hash tag `{{name}}`, \
                 and a brace in the prefix would break it",
                self.prefix
            )));
        }
        let (min_delay, max_delay) = (self.retry.min_delay(), self.retry.max_delay());
        if min_delay.is_zero() || min_delay > max_delay || max_delay > MAX_RETRY_DELAY {
            return Err(LockError::InvalidSettings(format!(
                "retry policy {min_delay:?}..{max_delay:?}: the minimum must be above zero and \
                 not above the maximum, and the maximum at most {MAX_RETRY_DELAY:?}"
            )));
        }
        if let Some(cap) = self.max_hold
            && (cap < self.ttl || cap > MAX_HOLD)
        {
            return Err(LockError::InvalidSettings(format!(
                "max_hold {cap:?} is outside ttl ({:?}) ..= {MAX_HOLD:?}: a cap below the \
                 lease cannot be kept; for no cap, do not call max_hold",
                self.ttl
            )));
        }
        check_range(
            "response_timeout",
            self.response_timeout,
            &RESPONSE_TIMEOUT_RANGE,
        )?;
        check_range(
            "fence_retention",
            self.fence_retention,
            &FENCE_RETENTION_RANGE,
        )?;
        if let Some(ReplicaWait { replicas, timeout }) = self.wait_for_replicas {
            if replicas == 0 {
                return Err(LockError::InvalidSettings(
                    "wait_for_replicas needs at least 1 replica; to turn the check off, do not \
                     call wait_for_replicas"
                        .to_owned(),
                ));
            }
            // WAIT takes whole milliseconds, and `WAIT n 0` blocks forever.
            if timeout < Duration::from_millis(1) || timeout > self.ttl {
                return Err(LockError::InvalidSettings(format!(
                    "wait_for_replicas timeout {timeout:?} is outside 1 ms..=ttl ({:?}): the \
                     lease runs while WAIT blocks, so keep it well below the ttl",
                    self.ttl
                )));
            }
        }
        Ok(())
    }

    /// [`validate`](Self::validate), and what grants of `kind` need: a semaphore has at
    /// least one permit.
    pub(crate) fn validate_kind(&self, kind: Kind) -> Result<(), LockError> {
        self.validate()?;
        if kind == Kind::Permit(0) {
            return Err(LockError::InvalidSettings(
                "a semaphore needs at least 1 permit; Locks::semaphore(n) takes n >= 1".to_owned(),
            ));
        }
        Ok(())
    }

    /// Checks what `lock()` needs on top of [`validate_kind`](Self::validate_kind), which
    /// its caller runs first (so the common checks run once per call).
    pub(crate) fn validate_wait(&self) -> Result<(), LockError> {
        if self.wait_timeout.is_zero() || self.wait_timeout > MAX_WAIT {
            return Err(LockError::InvalidSettings(format!(
                "wait_timeout {:?} is outside 1 ns..={MAX_WAIT:?}; for a single attempt call \
                 try_lock() instead",
                self.wait_timeout
            )));
        }
        Ok(())
    }

    /// How long, in milliseconds, the fencing counter lives after a grant with lease
    /// `ttl`: the lease plus the retention.
    pub(crate) fn fence_lifetime(&self, ttl: Duration) -> u64 {
        millis(ttl.saturating_add(self.fence_retention))
    }

    /// The key names of lock `name`, after checking the name.
    #[cfg(test)]
    pub(crate) fn keys(&self, name: &str) -> Result<Keys, LockError> {
        self.keys_of(name, Kind::Lock)
    }

    /// The key names of `name` for grants of `kind`, after checking the name.
    pub(crate) fn keys_of(&self, name: &str, kind: Kind) -> Result<Keys, LockError> {
        Keys::new(&self.prefix, name, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_settings_are_refused() {
        let mut s = Settings {
            wait_timeout: Duration::ZERO,
            ..Settings::default()
        };
        assert!(s.validate().is_ok());
        assert!(s.validate_wait().is_err());
        s.prefix = Arc::from("a{");
        assert!(s.validate().is_err());
        let s = Settings {
            retry: RetryPolicy::new(Duration::ZERO, Duration::from_millis(1)),
            ..Settings::default()
        };
        assert!(s.validate().is_err());
    }

    #[test]
    fn replica_wait_is_checked() {
        let with = |replicas, timeout| Settings {
            wait_for_replicas: Some(ReplicaWait { replicas, timeout }),
            ttl: Duration::from_secs(2),
            ..Settings::default()
        };
        assert!(with(1, Duration::from_millis(1)).validate().is_ok());
        assert!(with(3, Duration::from_secs(2)).validate().is_ok());
        assert!(with(0, Duration::from_secs(1)).validate().is_err());
        assert!(with(1, Duration::ZERO).validate().is_err());
        assert!(with(1, Duration::from_micros(999)).validate().is_err());
        assert!(with(1, Duration::from_millis(2_001)).validate().is_err());
    }
}
