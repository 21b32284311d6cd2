//! Lock settings, their safe defaults and limits, and the key names of a lock.

use std::sync::Arc;
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

/// How a waiter paces its attempts while a lock is held.
///
/// A waiter sleeps until the release notification arrives, or until the holder's
/// remaining lease runs out, or until this backoff passes, whichever is first. The
/// backoff grows from `min_delay`, doubling per attempt up to `max_delay`, and each
/// sleep is drawn uniformly from its upper half (jitter), so waiters that missed a
/// notification do not retry in lockstep. With notifications the backoff is only a
/// safety net; without them (`Locks::new`) it is the polling schedule.
///
/// ```no_run
/// use std::time::Duration;
/// use lockscript::RetryPolicy;
/// let policy = RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    min_delay: Duration,
    max_delay: Duration,
}

impl RetryPolicy {
    /// A policy from `min_delay` up to `max_delay`. Invalid pairs (zero, or min above
    /// max) are reported as [`LockError::InvalidSettings`] at the first lock call.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let policy = lockscript::RetryPolicy::new(Duration::from_millis(2), Duration::from_secs(1));
    /// ```
    pub fn new(min_delay: Duration, max_delay: Duration) -> Self {
        Self {
            min_delay,
            max_delay,
        }
    }

    /// The first backoff.
    ///
    /// ```no_run
    /// assert_eq!(lockscript::RetryPolicy::default().min_delay().as_millis(), 5);
    /// ```
    pub fn min_delay(&self) -> Duration {
        self.min_delay
    }

    /// The largest backoff.
    ///
    /// ```no_run
    /// assert_eq!(lockscript::RetryPolicy::default().max_delay().as_millis(), 250);
    /// ```
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// How long a waiter sleeps after its `waits`-th refused attempt: the backoff, but
    /// no longer than the holder's `remaining` lease (when known) or the time `left`
    /// before the caller's deadline.
    pub(crate) fn nap(&self, waits: u32, remaining: Option<Duration>, left: Duration) -> Duration {
        let backoff = self.delay(waits, getrandom::u64().unwrap_or(0));
        remaining
            .map_or(backoff, |r| r.max(Duration::from_millis(1)).min(backoff))
            .min(left)
    }

    /// The sleep before attempt `n` (0-based), jittered into the upper half.
    pub(crate) fn delay(&self, attempt: u32, jitter: u64) -> Duration {
        let grown = self
            .min_delay
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_delay);
        let half = grown / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
        half + Duration::from_nanos(jitter % nanos)
    }
}

/// 5 ms to 250 ms: a missed notification costs at most a quarter second, and a
/// polling waiter sends at most a few commands per second.
impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_millis(250))
    }
}

/// The builder methods shared by every handle; each handle type has a method
/// `fn settings_mut(&mut self) -> &mut Settings`. `$ty` is the type's path for the doc
/// examples.
macro_rules! settings_builder {
    ($ty:literal) => {
        /// The lease each grant asks for. Default 30 s; accepted 10 ms ..= 1 day.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.ttl(std::time::Duration::from_secs(10))
        /// # }
        /// ```
        #[must_use]
        pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
            self.settings_mut().ttl = ttl;
            self
        }

        /// How long `lock()` waits before `LockError::Timeout`. Default 10 s.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.wait_timeout(std::time::Duration::from_secs(2))
        /// # }
        /// ```
        #[must_use]
        pub fn wait_timeout(mut self, wait: std::time::Duration) -> Self {
            self.settings_mut().wait_timeout = wait;
            self
        }

        /// Renew leases every ttl/3 while guards live. Default on: long work keeps its
        /// lock, and a lease that cannot be renewed signals its loss.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.watchdog(false)
        /// # }
        /// ```
        #[must_use]
        pub fn watchdog(mut self, on: bool) -> Self {
            self.settings_mut().watchdog = on;
            self
        }

        /// Caps how long the watchdog keeps a lock: after `cap`, renewals stop and the
        /// lease runs out (then its loss is signalled). Default: no cap. Must be at
        /// least the ttl and at most [`MAX_HOLD`](crate::MAX_HOLD).
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.max_hold(std::time::Duration::from_secs(300))
        /// # }
        /// ```
        #[must_use]
        pub fn max_hold(mut self, cap: std::time::Duration) -> Self {
            self.settings_mut().max_hold = Some(cap);
            self
        }

        /// The key prefix: lock `name` lives at `<prefix>{name}`. Default `lock:`. It
        /// must not contain braces (they would break the shared hash tag).
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.prefix("billing:lock:")
        /// # }
        /// ```
        #[must_use]
        pub fn prefix(mut self, prefix: &str) -> Self {
            self.settings_mut().prefix = std::sync::Arc::from(prefix);
            self
        }

        /// How long one command may wait for the server's reply before the call fails
        /// with a timeout (a [`LockError::Redis`](crate::LockError::Redis) whose
        /// `is_timeout()` is true). Default 500 ms; accepted 1 ms ..= 60 s. It bounds
        /// every call: `try_lock`, `extend`, `is_held` and `release` return within it,
        /// and `lock()` within `wait_timeout` plus it.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.response_timeout(std::time::Duration::from_millis(200))
        /// # }
        /// ```
        #[must_use]
        pub fn response_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.settings_mut().response_timeout = timeout;
            self
        }

        /// How long a lock's fencing counter (`<prefix>{name}:fence`) outlives the
        /// lease of its last grant. Default 1 hour; accepted 1 ms ..= 365 days.
        ///
        /// An idle counter then expires, so locking per entity (`orders:42`,
        /// `orders:43`, ...) does not fill the server with counters. The next grant
        /// restarts the counter from the server's clock in microseconds (`TIME`), so
        /// fencing tokens still rise across the expiry, provided the server's clock did
        /// not step back by more than the time the counter was idle. Keep it well
        /// above the largest clock step your servers may take.
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.fence_retention(std::time::Duration::from_secs(24 * 60 * 60))
        /// # }
        /// ```
        #[must_use]
        pub fn fence_retention(mut self, retention: std::time::Duration) -> Self {
            self.settings_mut().fence_retention = retention;
            self
        }

        /// How waiters pace their attempts; see [`RetryPolicy`](crate::RetryPolicy).
        ///
        /// ```no_run
        /// # use std::time::Duration;
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.retry(lockscript::RetryPolicy::new(Duration::from_millis(2), Duration::from_millis(50)))
        /// # }
        /// ```
        #[must_use]
        pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
            self.settings_mut().retry = policy;
            self
        }

        /// How the lock scripts reach the server: [`Delivery::Scripts`](crate::Delivery)
        /// (EVALSHA, the default) or [`Delivery::Functions`](crate::Delivery) (FCALL of
        /// the binary's function library, loaded on the first call that misses it).
        /// Functions survive a failover and a restart with the data, so a promoted
        /// replica serves the first lock call without loading anything; they need Redis
        /// 7.0+ or Valkey 7.2+ (else [`LockError::Unsupported`](crate::LockError)).
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.delivery(lockscript::Delivery::Functions)
        /// # }
        /// ```
        #[must_use]
        pub fn delivery(mut self, delivery: crate::Delivery) -> Self {
            self.settings_mut().delivery = delivery;
            self
        }

        /// Fair mode: waiters of every process stand in one queue per lock, kept on the
        /// server, and are served first come, first served. A release hands the lock
        /// straight to the first live waiter (its token, a fresh lease, the next fencing
        /// token) and wakes that waiter alone, on its handle's own channel: no waiter
        /// makes a second attempt, and none is overtaken. Default off (a release then
        /// wakes waiters, and the first to ask wins).
        ///
        /// Every handle that locks a name should use the same mode: a handle without it
        /// ignores the queue. A waiter that stops (cancelled, timed out) leaves the queue
        /// at once; one whose process died is skipped within the bound the README
        /// states. One server or one Redis Cluster only: a Redlock handle refuses it with
        /// [`LockError::InvalidSettings`](crate::LockError::InvalidSettings).
        ///
        /// ```no_run
        #[doc = concat!("# fn f(locks: ", $ty, ") -> ", $ty, " {")]
        /// locks.fair(true)
        /// # }
        /// ```
        #[must_use]
        pub fn fair(mut self, on: bool) -> Self {
            self.settings_mut().fair = on;
            self
        }
    };
}
pub(crate) use settings_builder;

/// The lock protocol's script calls, as every face (async, blocking, Redlock) sends
/// them: with this handle's ttl arithmetic and its [`Delivery`](crate::Delivery).
impl Settings {
    /// acquire-with-retry.lua: take `keys` for `token` with the handle's ttl (in fair
    /// mode fair-queue.lua's `acquire` without a ticket, which never jumps the queue).
    pub(crate) fn acquire_call(&self, keys: &Keys, token: &str) -> crate::Invocation<Acquired> {
        if self.queued(keys) {
            return self
                .fair_call(keys, "acquire", token, "", self.ttl)
                .reply_as();
        }
        crate::builtin::acquire(
            &keys.lock,
            &keys.fence,
            &keys.holders(),
            token,
            millis(self.ttl),
            self.fence_lifetime(self.ttl),
        )
        .delivery(self.delivery)
        .reply_as()
    }

    /// Whether grants of `keys` go through the waiter queue (fair-queue.lua): in fair
    /// mode, and always for read/write locks and semaphores.
    pub(crate) fn queued(&self, keys: &Keys) -> bool {
        self.fair || keys.kind != Kind::Lock
    }

    /// fair-queue.lua: `op` for `token` (with its `ticket`, or `""`) and a lease of
    /// `lease`, for the kind of `keys`.
    pub(crate) fn fair_call(
        &self,
        keys: &Keys,
        op: &str,
        token: &str,
        ticket: &str,
        lease: Duration,
    ) -> crate::Invocation<(i64, i64, i64, i64)> {
        crate::builtin::fair_queue(
            &keys.lock,
            &keys.fence,
            &keys.queue(),
            &keys.alive(),
            &keys.holders(),
            &keys.fences(),
            op,
            token,
            ticket,
            keys.kind.code(),
            millis(lease),
            self.fence_lifetime(self.ttl.max(lease)),
            millis(crate::fair::WAITER_LEASE),
            keys.kind.permits(),
        )
        .delivery(self.delivery)
    }

    /// Whether `token` holds a grant of `keys`, as a script: for readers and permits
    /// (`None` for a lock or a writer, whose key a plain `GET` reads).
    pub(crate) fn holds_call(
        &self,
        keys: &Keys,
        token: &str,
    ) -> Option<crate::Invocation<Confirmed>> {
        keys.kind.shared().then(|| {
            self.fair_call(keys, "holds", token, "", self.ttl)
                .reply_as()
        })
    }

    /// fair-queue.lua's `downgrade`: the writer `token` becomes a reader with lease `ttl`.
    pub(crate) fn downgrade_call(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
    ) -> crate::Invocation<Confirmed> {
        let mut write = keys.clone();
        write.kind = Kind::Write;
        self.fair_call(&write, "downgrade", token, "", ttl)
            .reply_as()
    }

    /// renew.lua: set the lease of `token`'s lock to `ttl`.
    pub(crate) fn renew_call(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
    ) -> crate::Invocation<Confirmed> {
        if keys.kind.shared() {
            return self.fair_call(keys, "renew", token, "", ttl).reply_as();
        }
        crate::builtin::renew(&keys.lock, token, millis(ttl))
            .delivery(self.delivery)
            .reply_as()
    }

    /// compare-del.lua: release `token`'s lock (in fair mode fair-queue.lua's
    /// `release`, which hands it to the first live waiter).
    pub(crate) fn release_call(&self, keys: &Keys, token: &str) -> crate::Invocation<Confirmed> {
        if self.queued(keys) {
            return self
                .fair_call(keys, "release", token, "", self.ttl)
                .reply_as();
        }
        crate::builtin::compare_del(&keys.lock, token)
            .delivery(self.delivery)
            .reply_as()
    }

    /// The release of a grant nobody owns; for a fair waiter that gave up, its ticket
    /// leaves the queue in the same call (and a grant made to it goes to the next).
    pub(crate) fn abandoned_call(
        &self,
        abandoned: &crate::grant::Abandoned,
    ) -> crate::Invocation<Confirmed> {
        let token = abandoned.token.as_str();
        match &abandoned.ticket {
            Some(ticket) => self
                .fair_call(&abandoned.keys, "release", token, ticket, self.ttl)
                .reply_as(),
            None => self.release_call(&abandoned.keys, token),
        }
    }

    /// handover.lua: pass `token`'s lock to `next` with lease `ttl`.
    pub(crate) fn handover_call(
        &self,
        keys: &Keys,
        token: &str,
        next: &str,
        ttl: Duration,
    ) -> crate::Invocation<i64> {
        crate::builtin::handover(
            &keys.lock,
            &keys.fence,
            token,
            next,
            millis(ttl),
            self.fence_lifetime(ttl),
        )
        .delivery(self.delivery)
    }

    /// raise-fence.lua: raise the counter of `keys` to at least `floor`.
    #[cfg(feature = "redlock")]
    pub(crate) fn raise_fence_call(&self, keys: &Keys, floor: u64) -> crate::Invocation<i64> {
        crate::builtin::raise_fence(&keys.fence, floor, self.fence_lifetime(self.ttl))
            .delivery(self.delivery)
    }
}

/// Everything a [`Locks`](crate::Locks) handle is configured with.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) ttl: Duration,
    pub(crate) wait_timeout: Duration,
    pub(crate) watchdog: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) prefix: Arc<str>,
    pub(crate) retry: RetryPolicy,
    /// `WAIT` after each grant (async `Locks` only; `Locks::wait_for_replicas`).
    pub(crate) wait_for_replicas: Option<ReplicaWait>,
    /// How long one command may wait for its reply.
    pub(crate) response_timeout: Duration,
    /// How long the fencing counter outlives a grant's lease.
    pub(crate) fence_retention: Duration,
    /// EVALSHA or FCALL.
    pub(crate) delivery: crate::Delivery,
    /// Fair mode: one queue per lock on the server, direct handoff.
    pub(crate) fair: bool,
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
        let RetryPolicy {
            min_delay,
            max_delay,
        } = self.retry;
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

    /// Checks what `lock()` needs on top of [`validate`](Self::validate).
    pub(crate) fn validate_wait(&self) -> Result<(), LockError> {
        self.validate()?;
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
        check_name(name)?;
        // Built by hand: this runs on every call, and three `format!`s cost about
        // 2,000 instructions per call (callgrind, 4,000 try_lock+release cycles).
        let mut lock = String::with_capacity(self.prefix.len() + name.len() + 2);
        lock.push_str(&self.prefix);
        lock.push('{');
        lock.push_str(name);
        lock.push('}');
        Ok(Keys {
            kind,
            fence: [lock.as_str(), ":fence"].concat(),
            channel: [lock.as_str(), ":released"].concat(),
            lock,
            name: name.to_owned(),
        })
    }
}

/// Refuses a duration setting outside its accepted range.
fn check_range(
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

fn check_name(name: &str) -> Result<(), LockError> {
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

/// The Redis names of one lock. They share the hash tag `{name}`, so on a Cluster all
/// of them live in one slot.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// What a grant of this name is.
    pub(crate) kind: Kind,
    /// The name the user gave.
    pub(crate) name: String,
    /// `lock:{name}`: holds the owner's token.
    pub(crate) lock: String,
    /// `lock:{name}:fence`: the fencing counter.
    pub(crate) fence: String,
    /// `lock:{name}:released`: the release channel compare-del publishes on.
    pub(crate) channel: String,
}

impl Keys {
    /// `lock:{name}:queue`: the waiters by arrival (fair-queue.lua).
    pub(crate) fn queue(&self) -> String {
        [self.lock.as_str(), ":queue"].concat()
    }

    /// `lock:{name}:alive`: the waiters by deadline (fair-queue.lua).
    pub(crate) fn alive(&self) -> String {
        [self.lock.as_str(), ":alive"].concat()
    }

    /// `lock:{name}:holders`: readers or permit holders by the end of their lease
    /// (fair-queue.lua).
    pub(crate) fn holders(&self) -> String {
        [self.lock.as_str(), ":holders"].concat()
    }

    /// `lock:{name}:fences`: the fencing token of each reader or permit holder
    /// (fair-queue.lua).
    pub(crate) fn fences(&self) -> String {
        [self.lock.as_str(), ":fences"].concat()
    }
}

/// What a grant of a name is: the kind fair-queue.lua serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A lock ([`crate::Locks`]): the token in the lock key.
    Lock,
    /// The write side of a read/write lock: the token in the lock key, like a lock.
    Write,
    /// The read side of a read/write lock: a member of the holders.
    Read,
    /// A permit of a semaphore with this many permits: a member of the holders.
    Permit(u32),
}

impl Kind {
    /// The kind's letter in fair-queue.lua.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Kind::Lock | Kind::Write => "x",
            Kind::Read => "r",
            Kind::Permit(_) => "p",
        }
    }

    /// What a grant of this kind is, in an error message.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Kind::Lock => "a lock",
            Kind::Write => "a write lock",
            Kind::Read => "a read lock",
            Kind::Permit(_) => "a semaphore permit",
        }
    }

    /// Whether its holders are members of `lock:{name}:holders` (not the lock key).
    pub(crate) fn shared(self) -> bool {
        matches!(self, Kind::Read | Kind::Permit(_))
    }

    fn permits(self) -> u64 {
        match self {
            Kind::Permit(n) => u64::from(n),
            _ => 0,
        }
    }
}

/// What an acquire call answered, read from acquire-with-retry.lua's `{1, fence}` /
/// `{0, pttl}` or from fair-queue.lua's `{1, fence, lease, now}` / `{0, 0, pttl, now}`
/// (`{2, ..}`, handed before, cannot happen to the fresh token of an attempt: read as
/// held), as the pair `(acquired, fence or pttl)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acquired(pub(crate) i64, pub(crate) i64);

impl redis::FromRedisValue for Acquired {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        // Read in place, without collecting: this is every acquire's reply.
        let redis::Value::Array(values) = v else {
            return Err(String::from("an acquire reply that is not an array").into());
        };
        let n = values.len();
        let mut values = values.into_iter().map(i64::from_redis_value);
        let mut next = || {
            values
                .next()
                .unwrap_or_else(|| Err(String::from("a short acquire reply").into()))
        };
        match (n, next()?, next()?) {
            (2, acquired, value) => Ok(Self(acquired, value)),
            (4, 1, fence) => Ok(Self(1, fence)),
            (4, _, _) => Ok(Self(0, next()?)),
            _ => Err(format!("an acquire reply of {n} values").into()),
        }
    }
}

/// What a release, renewal or check answered: `1`/`0` from compare-del.lua or renew.lua,
/// or the first value of fair-queue.lua's reply; whether it was done (the token held).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Confirmed(pub(crate) bool);

impl redis::FromRedisValue for Confirmed {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let status = match v {
            redis::Value::Array(values) => match values.into_iter().next() {
                Some(first) => i64::from_redis_value(first)?,
                None => return Err(String::from("an empty script reply").into()),
            },
            other => i64::from_redis_value(other)?,
        };
        Ok(Self(status == 1))
    }
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
    fn acquire_replies_of_both_scripts_read_alike() {
        use redis::{FromRedisValue, Value};
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&i| Value::Int(i)).collect());
        let read = |v: &[i64]| Acquired::from_redis_value(ints(v));
        assert_eq!(read(&[1, 7]).unwrap(), Acquired(1, 7));
        assert_eq!(read(&[0, 250]).unwrap(), Acquired(0, 250));
        assert_eq!(read(&[1, 7, 30_000, 5]).unwrap(), Acquired(1, 7));
        assert_eq!(read(&[0, 0, 250, 5]).unwrap(), Acquired(0, 250));
        assert!(read(&[1]).is_err());
        assert!(read(&[1, 2, 3]).is_err());
        assert!(Acquired::from_redis_value(Value::Int(1)).is_err());
        assert_eq!(
            Confirmed::from_redis_value(ints(&[1, 0, 0, 5])).unwrap(),
            Confirmed(true)
        );
        assert_eq!(
            Confirmed::from_redis_value(Value::Int(0)).unwrap(),
            Confirmed(false)
        );
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = Settings::default().keys("orders:42").unwrap();
        assert_eq!(keys.lock, "lock:{orders:42}");
        assert_eq!(keys.fence, "lock:{orders:42}:fence");
        assert_eq!(keys.channel, "lock:{orders:42}:released");
    }

    #[test]
    fn bad_names_are_refused() {
        let s = Settings::default();
        assert!(matches!(s.keys(""), Err(LockError::InvalidName { .. })));
        assert!(matches!(
            s.keys(&"x".repeat(513)),
            Err(LockError::InvalidName { .. })
        ));
        assert!(s.keys(&"x".repeat(512)).is_ok());
        assert!(matches!(s.keys("a}b"), Err(LockError::InvalidName { .. })));
    }

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

    #[test]
    fn backoff_grows_within_bounds() {
        let p = RetryPolicy::new(Duration::from_millis(4), Duration::from_millis(100));
        for attempt in 0..40 {
            for jitter in [0, 1, u64::MAX / 3, u64::MAX] {
                let d = p.delay(attempt, jitter);
                assert!(d <= Duration::from_millis(100), "{d:?}");
                assert!(d >= Duration::from_millis(2), "{d:?}");
            }
        }
        assert!(p.delay(10, 0) >= Duration::from_millis(50));
    }

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
