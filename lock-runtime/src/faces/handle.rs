//! [`Handle`]: what a lock handle is ([`Locks`](crate::Locks) on one server or a Cluster,
//! [`Redlock`](crate::Redlock) on N masters, [`blocking::Locks`](crate::blocking::Locks)
//! without async), with the builder methods they share, written once here.

use std::fmt;
use std::time::Duration;

use crate::machine::settings::{ReplicaWait, Settings};

/// A lock handle over the engine `E`. Use it through its names: [`Locks`](crate::Locks),
/// [`Redlock`](crate::Redlock) and [`blocking::Locks`](crate::blocking::Locks) (as
/// sqlx's `PgPool` is its `Pool<Postgres>`). The builder methods below are the same on
/// each; the lock methods are on each name's page.
///
/// Cheap to clone (clones share the connection, the notification subscription, the
/// local queue and the watchdog); builder methods take and return `Self`, and a setting
/// that cannot work is reported as a typed error by the first call that uses it, never
/// as a panic.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let locks = lockscript::Locks::connect(&client).await?
///     .ttl(Duration::from_secs(30))
///     .wait_timeout(Duration::from_secs(10));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Handle<E> {
    pub(crate) engine: E,
}

/// What a handle's engine gives its builder methods. Implemented in this crate only,
/// by the async engine and the blocking one.
pub trait Configure {
    /// The settings, to change before the handle is used (copied on write: clones made
    /// before keep theirs).
    #[doc(hidden)]
    fn settings_mut(&mut self) -> &mut Settings;

    /// The handle's `Debug` output (never a token or a password).
    #[doc(hidden)]
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// What an engine on one server (or one Cluster) adds: notifications, `WAIT` for
/// replicas, and what the server offers. Not a Redlock quorum.
pub trait OneServer: Configure {
    /// The server's native commands, once asked.
    #[doc(hidden)]
    fn offered(&self) -> Option<crate::NativeCommands>;

    /// Release notifications through a pub/sub connection opened from `client`.
    #[doc(hidden)]
    fn notify_from(&mut self, client: redis::Client);
}

impl<E: Configure> fmt::Debug for Handle<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.engine.describe(f)
    }
}

impl<E: Configure> Handle<E> {
    /// The lease each grant asks for. Default 30 s; accepted 10 ms ..= 1 day.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.ttl(std::time::Duration::from_secs(10))
    /// # }
    /// ```
    #[must_use]
    pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
        self.engine.settings_mut().ttl = ttl;
        self
    }

    /// How long `lock()` waits before `LockError::Timeout`. Default 10 s.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.wait_timeout(std::time::Duration::from_secs(2))
    /// # }
    /// ```
    #[must_use]
    pub fn wait_timeout(mut self, wait: std::time::Duration) -> Self {
        self.engine.settings_mut().wait_timeout = wait;
        self
    }

    /// Renew leases every ttl/3 while guards live. Default on: long work keeps its
    /// lock, and a lease that cannot be renewed signals its loss.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.watchdog(false)
    /// # }
    /// ```
    #[must_use]
    pub fn watchdog(mut self, on: bool) -> Self {
        self.engine.settings_mut().watchdog = on;
        self
    }

    /// Caps how long the watchdog keeps a lock: after `cap`, renewals stop and the
    /// lease runs out (then its loss is signalled). Default: no cap. Must be at
    /// least the ttl and at most [`MAX_HOLD`](crate::MAX_HOLD).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.max_hold(std::time::Duration::from_secs(300))
    /// # }
    /// ```
    #[must_use]
    pub fn max_hold(mut self, cap: std::time::Duration) -> Self {
        self.engine.settings_mut().max_hold = Some(cap);
        self
    }

    /// The key prefix: lock `name` lives at `<prefix>{name}`. Default `lock:`. It
    /// must not contain braces (they would break the shared hash tag).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.prefix("billing:lock:")
    /// # }
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.engine.settings_mut().prefix = std::sync::Arc::from(prefix);
        self
    }

    /// How long one command may wait for the server's reply before the call fails
    /// with a timeout (a [`LockError::Redis`](crate::LockError::Redis) whose
    /// `is_timeout()` is true). Default 500 ms; accepted 1 ms ..= 60 s. It bounds
    /// every call: `try_lock`, `extend`, `is_held` and `release` return within it,
    /// and `lock()` within `wait_timeout` plus it.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.response_timeout(std::time::Duration::from_millis(200))
    /// # }
    /// ```
    #[must_use]
    pub fn response_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.engine.settings_mut().response_timeout = timeout;
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
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.fence_retention(std::time::Duration::from_secs(24 * 60 * 60))
    /// # }
    /// ```
    #[must_use]
    pub fn fence_retention(mut self, retention: std::time::Duration) -> Self {
        self.engine.settings_mut().fence_retention = retention;
        self
    }

    /// How waiters pace their attempts; see [`RetryPolicy`](crate::RetryPolicy).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.retry(lockscript::RetryPolicy::new(Duration::from_millis(2), Duration::from_millis(50)))
    /// # }
    /// ```
    #[must_use]
    pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
        self.engine.settings_mut().retry = policy;
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
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.delivery(lockscript::Delivery::Functions)
    /// # }
    /// ```
    #[must_use]
    pub fn delivery(mut self, delivery: crate::Delivery) -> Self {
        self.engine.settings_mut().delivery = delivery;
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
    /// at once; one whose process died is skipped within the bound the guide
    /// states. One server or one Redis Cluster only: a Redlock handle refuses it with
    /// [`LockError::InvalidSettings`](crate::LockError::InvalidSettings).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.fair(true)
    /// # }
    /// ```
    #[must_use]
    pub fn fair(mut self, on: bool) -> Self {
        self.engine.settings_mut().fair = on;
        self
    }

    /// Whether a plain lock's renewals and releases use the server's own conditional
    /// commands where it offers them: `SET … IFEQ … PX` to renew, `DELIFEQ` or `DELEX …
    /// IFEQ` (with the release notification in the same round trip) to release, at a
    /// fraction of a script's server time. Same meaning as the scripts: never a change
    /// to another owner's key, "not held" when not ours, an error means not done.
    /// The handle asks the server what it offers (`COMMAND DOCS`; on a Redis Cluster
    /// every primary) beside its first renewal or release, which goes as its script
    /// meanwhile (no call waits for the question, which has a bound of its own), and
    /// again after a call meets a reconnect or a failover; see
    /// [`offered_commands`](Self::offered_commands). Default on; off: always the
    /// scripts (for an audit that wants every lock command to be a script).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.native_commands(false)
    /// # }
    /// ```
    #[must_use]
    pub fn native_commands(mut self, on: bool) -> Self {
        self.engine.settings_mut().native = on;
        self
    }
}

impl<E: OneServer> Handle<E> {
    /// What the server was found to offer for [`native_commands`](Self::native_commands):
    /// `None` until the question a renewal or release asked beside it is answered (and
    /// again after a reconnect, until it is answered again). A question with no answer
    /// in time (a stalled server, a Cluster primary that did not answer) is kept as
    /// offering nothing.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) {
    /// if let Some(found) = locks.offered_commands() {
    ///     println!("native releases: {}", found.releases());
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn offered_commands(&self) -> Option<crate::NativeCommands> {
        self.engine.offered()
    }

    /// After each grant, waits until at least `replicas` replicas of the master that
    /// granted it have acknowledged it (Redis `WAIT replicas timeout`), for at most
    /// `timeout`, like Redisson's lock. With fewer acknowledgements the grant is released
    /// again (in the background) and `try_lock`/`lock` return
    /// [`LockError::NotReplicated`](crate::LockError::NotReplicated) at once (no retry: it is a replication problem, not
    /// contention). Default: off. `blocking::Locks` has it too.
    ///
    /// This narrows, but does not close, the window in which a failover loses a grant:
    /// replication stays asynchronous, `WAIT` only reports how far it got, and a replica
    /// that acknowledged is not necessarily the one promoted.
    ///
    /// `WAIT` goes on the connection that acquired, in one pipeline behind a renewal of
    /// the lease (a write that follows the grant in the replication stream), so it counts
    /// exactly the replicas that have the grant, even after a reconnect; on a cluster
    /// connection the pipeline is routed to the master owning the lock's slot. `WAIT`
    /// blocks that connection while it waits, so commands of other tasks sharing it queue
    /// behind it for up to `timeout` when replicas lag; and the lease runs meanwhile (it
    /// was counted from before the grant). Keep `timeout` short, well below the ttl. A
    /// grant then takes up to the response timeout plus `timeout`.
    ///
    /// `replicas` must be at least 1 and `timeout` within 1 ms ..= ttl, else
    /// [`LockError::InvalidSettings`](crate::LockError::InvalidSettings) at the first call.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::Locks) -> lockscript::Locks {
    /// locks.wait_for_replicas(1, std::time::Duration::from_millis(200))
    /// # }
    /// ```
    #[must_use]
    pub fn wait_for_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.engine.settings_mut().wait_for_replicas = Some(ReplicaWait { replicas, timeout });
        self
    }

    /// Wakes waiters at once when a lock is released, through a pub/sub connection
    /// opened from `client` in the background on first contention (and re-opened if it
    /// drops). No waiter ever waits for that connection: until it answers, waiters poll.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let conn = client.get_multiplexed_async_connection().await?;
    /// let locks = lockscript::Locks::new(conn).notifications(client);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn notifications(mut self, client: redis::Client) -> Self {
        self.engine.notify_from(client);
        self
    }
}

#[cfg(feature = "tokio")]
impl<B: crate::exec::backend::Backend> Configure for crate::exec::engine::Engine<B> {
    fn settings_mut(&mut self) -> &mut Settings {
        std::sync::Arc::make_mut(&mut self.settings)
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(B::FACE)
            .field("settings", &self.settings)
            .field("notifications", &self.notifications.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "tokio")]
impl<C> OneServer for crate::exec::engine::Engine<crate::exec::node::Node<C>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn offered(&self) -> Option<crate::NativeCommands> {
        self.backend.offered.get()
    }

    fn notify_from(&mut self, client: redis::Client) {
        let notifications = crate::exec::notify::Notifications::new(client);
        self.notifications = Some(std::sync::Arc::new(notifications));
    }
}

#[cfg(feature = "blocking")]
impl<C> Configure for crate::exec::blocking::Engine<C> {
    fn settings_mut(&mut self) -> &mut Settings {
        std::sync::Arc::make_mut(&mut self.settings)
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Locks")
            .field("settings", &self.settings)
            .field("notifications", &self.notifications.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "blocking")]
impl<C> OneServer for crate::exec::blocking::Engine<C> {
    fn offered(&self) -> Option<crate::NativeCommands> {
        self.shared.conn.offered.get()
    }

    fn notify_from(&mut self, client: redis::Client) {
        let notifications = crate::exec::notify::BlockingNotifications {
            client,
            started: std::sync::OnceLock::new(),
        };
        self.notifications = Some(std::sync::Arc::new(notifications));
    }
}
