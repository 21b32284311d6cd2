//! [`Locks`], the blocking handle: builder, `try_lock`, `lock`, `with_lock`.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::guard::LockGuard;
use crate::LockError;
use crate::exec::blocking::{BlockingNotifications, Conn, Shared, Tune};
use crate::machine::acquire::Acquire;
use crate::machine::grant::Granted;
use crate::machine::key::Kind;
use crate::machine::settings::{ReplicaWait, Settings};

/// Acquires distributed locks on one Redis server, without async.
///
/// Cheap to clone; builder methods take and return `Self`; invalid settings are typed
/// errors at the first call.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let locks = lockscript::blocking::Locks::connect(&client)?;
/// if let Some(guard) = locks.try_lock("reports:daily")? {
///     guard.release()?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct Locks<C = redis::Connection> {
    shared: Arc<Shared<C>>,
    pub(super) settings: Arc<Settings>,
    notifications: Option<Arc<BlockingNotifications>>,
}

impl<C> Clone for Locks<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            settings: Arc::clone(&self.settings),
            notifications: self.notifications.clone(),
        }
    }
}

impl<C> fmt::Debug for Locks<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Locks")
            .field("settings", &self.settings)
            .field("notifications", &self.notifications.is_some())
            .finish_non_exhaustive()
    }
}

impl Locks<redis::Connection> {
    /// Opens a sync connection and enables release notifications. The connection's
    /// reads and writes are bounded by the response timeout (500 ms unless set), and it
    /// is re-opened when it breaks (a server restart, a reset). The background thread
    /// that renews leases starts here; it takes turns on the same connection, so a
    /// background release never overtakes the attempt it cleans up after.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let locks = lockscript::blocking::Locks::connect(&client)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect(client: &redis::Client) -> Result<Self, LockError> {
        // Without `CLIENT SETINFO` at connect: each of its two replies would be awaited
        // for the whole timeout on a server that stopped answering, and a re-open must
        // fit in the call's one response timeout. (Redis 7.0 refuses it anyway.)
        let info = client.get_connection_info().clone();
        let redis = info.redis_settings().clone().set_skip_set_lib_name();
        let lean = redis::Client::open(info.set_redis_settings(redis))?;
        let open = move |within| lean.get_connection_with_timeout(within);
        let mut conn = open(Duration::from_secs(1))?;
        conn.set_read_timeout(Some(crate::DEFAULT_RESPONSE_TIMEOUT))?;
        crate::script::functions::lua_probed(redis::ConnectionLike::req_command(
            &mut conn,
            &crate::script::functions::lua_probe(),
        ))?;
        let tune: Tune<redis::Connection> = Arc::new(|conn, timeout| {
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))
        });
        let locks = Self::with_conn(Conn::new(conn, Some(Arc::new(open)), Some(tune)))
            .notifications(client.clone());
        // The background thread and its connection now, while connecting anyway: opened
        // on first use, they would cost the first lock() (or the first guard dropped) a
        // connect of up to a response timeout, beyond its bound when the server is slow.
        locks.shared.worker();
        Ok(locks)
    }
}

impl<C> Locks<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// Uses an existing sync connection. Without
    /// [`notifications`](Self::notifications), waiters poll with the retry policy. The
    /// connection's own timeouts bound each command (set a read timeout on it), and a
    /// broken connection is not re-opened; a call's wait for its turn on the connection
    /// counts against the response timeout. [`connect`](Locks::connect) sets the
    /// timeouts and re-opens.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let locks = lockscript::blocking::Locks::new(client.get_connection()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(conn: C) -> Self {
        Self::with_conn(Conn::new(conn, None, None))
    }

    fn with_conn(conn: Conn<C>) -> Self {
        Self {
            shared: Arc::new(Shared {
                conn: Arc::new(conn),
                worker: OnceLock::new(),
                queue: Arc::default(),
            }),
            settings: Arc::new(Settings::default()),
            notifications: None,
        }
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    /// The lease each grant asks for. See [`Locks::ttl`](crate::Locks::ttl).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.ttl(std::time::Duration::from_secs(10))
    /// # }
    /// ```
    #[must_use]
    pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
        self.settings_mut().ttl = ttl;
        self
    }

    /// How long `lock()` waits before `LockError::Timeout`. See
    /// [`Locks::wait_timeout`](crate::Locks::wait_timeout).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.wait_timeout(std::time::Duration::from_secs(2))
    /// # }
    /// ```
    #[must_use]
    pub fn wait_timeout(mut self, wait: std::time::Duration) -> Self {
        self.settings_mut().wait_timeout = wait;
        self
    }

    /// Renew leases every ttl/3 while guards live. See
    /// [`Locks::watchdog`](crate::Locks::watchdog).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.watchdog(false)
    /// # }
    /// ```
    #[must_use]
    pub fn watchdog(mut self, on: bool) -> Self {
        self.settings_mut().watchdog = on;
        self
    }

    /// Caps how long the watchdog keeps a lock: after `cap`, renewals stop and the lease
    /// runs out (then its loss is signalled). See
    /// [`Locks::max_hold`](crate::Locks::max_hold).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.max_hold(std::time::Duration::from_secs(300))
    /// # }
    /// ```
    #[must_use]
    pub fn max_hold(mut self, cap: std::time::Duration) -> Self {
        self.settings_mut().max_hold = Some(cap);
        self
    }

    /// The key prefix: lock `name` lives at `<prefix>{name}`. See
    /// [`Locks::prefix`](crate::Locks::prefix).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.prefix("billing:lock:")
    /// # }
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.settings_mut().prefix = std::sync::Arc::from(prefix);
        self
    }

    /// How long one command may wait for the server's reply before the call fails with a
    /// timeout (a [`LockError::Redis`](crate::LockError::Redis) whose `is_timeout()` is
    /// true). See [`Locks::response_timeout`](crate::Locks::response_timeout).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.response_timeout(std::time::Duration::from_millis(200))
    /// # }
    /// ```
    #[must_use]
    pub fn response_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.settings_mut().response_timeout = timeout;
        self
    }

    /// How long a lock's fencing counter (`<prefix>{name}:fence`) outlives the lease of its
    /// last grant. See [`Locks::fence_retention`](crate::Locks::fence_retention).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.fence_retention(std::time::Duration::from_secs(24 * 60 * 60))
    /// # }
    /// ```
    #[must_use]
    pub fn fence_retention(mut self, retention: std::time::Duration) -> Self {
        self.settings_mut().fence_retention = retention;
        self
    }

    /// How waiters pace their attempts; see [`RetryPolicy`](crate::RetryPolicy). See
    /// [`Locks::retry`](crate::Locks::retry).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.retry(lockscript::RetryPolicy::new(Duration::from_millis(2), Duration::from_millis(50)))
    /// # }
    /// ```
    #[must_use]
    pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
        self.settings_mut().retry = policy;
        self
    }

    /// How the lock scripts reach the server: [`Delivery::Scripts`](crate::Delivery)
    /// (EVALSHA, the default) or [`Delivery::Functions`](crate::Delivery) (FCALL of the
    /// binary's function library, loaded on the first call that misses it). See
    /// [`Locks::delivery`](crate::Locks::delivery).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.delivery(lockscript::Delivery::Functions)
    /// # }
    /// ```
    #[must_use]
    pub fn delivery(mut self, delivery: crate::Delivery) -> Self {
        self.settings_mut().delivery = delivery;
        self
    }

    /// Fair mode: waiters of every process stand in one queue per lock, kept on the server,
    /// and are served first come, first served. See [`Locks::fair`](crate::Locks::fair).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.fair(true)
    /// # }
    /// ```
    #[must_use]
    pub fn fair(mut self, on: bool) -> Self {
        self.settings_mut().fair = on;
        self
    }

    /// Native renewals and releases where the server offers them; see
    /// [`Locks::native_commands`](crate::Locks::native_commands). Default on.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.native_commands(false)
    /// # }
    /// ```
    #[must_use]
    pub fn native_commands(mut self, on: bool) -> Self {
        self.settings_mut().native = on;
        self
    }

    /// What the server was found to offer; see
    /// [`Locks::offered_commands`](crate::Locks::offered_commands).
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) {
    /// println!("{:?}", locks.offered_commands());
    /// # }
    /// ```
    #[must_use]
    pub fn offered_commands(&self) -> Option<crate::NativeCommands> {
        self.shared.conn.offered.get()
    }

    /// After each grant, renew.lua and `WAIT replicas timeout` in one pipeline on the
    /// handle's connection, as [`crate::Locks::wait_for_replicas`] describes; a grant
    /// with fewer acknowledgements is released and the call fails with
    /// [`LockError::NotReplicated`]. `WAIT` holds the handle's connection meanwhile: keep
    /// `timeout` short. Default: off.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> lockscript::blocking::Locks {
    /// locks.wait_for_replicas(1, std::time::Duration::from_millis(200))
    /// # }
    /// ```
    #[must_use]
    pub fn wait_for_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.settings_mut().wait_for_replicas = Some(ReplicaWait { replicas, timeout });
        self
    }

    /// Wakes waiters when a lock is released, through a pub/sub connection opened from
    /// `client` on first contention and kept by one background thread.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let locks = lockscript::blocking::Locks::new(client.get_connection()?)
    ///     .notifications(client);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn notifications(mut self, client: redis::Client) -> Self {
        self.notifications = Some(Arc::new(BlockingNotifications {
            client,
            started: OnceLock::new(),
        }));
        self
    }

    /// One attempt: `Ok(Some(guard))` when acquired, `Ok(None)` when held. Returns
    /// within the response timeout.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
    /// if let Some(guard) = locks.try_lock("reports:daily")? {
    ///     guard.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self, name: &str) -> Result<Option<LockGuard<C>>, LockError> {
        self.try_grant(name, Kind::Lock)
    }

    /// One attempt at a grant of `kind`.
    pub(crate) fn try_grant(
        &self,
        name: &str,
        kind: Kind,
    ) -> Result<Option<LockGuard<C>>, LockError> {
        self.settings.validate_kind(kind)?;
        let keys = self.settings.keys_of(name, kind)?;
        let granted = self.run(Acquire::once(keys, &self.settings, Instant::now()))?;
        Ok(granted.map(|g| self.guard(g)))
    }

    /// Blocks until the lock is acquired, or fails after `wait_timeout` with
    /// [`LockError::Timeout`] (or the last error, when the server could not be
    /// reached). Returns within `wait_timeout` plus the response timeout.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
    /// let guard = locks.lock("orders:42")?;
    /// guard.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, name: &str) -> Result<LockGuard<C>, LockError> {
        self.grant(name, Kind::Lock, self.settings.watchdog)
    }

    /// Blocks until a grant of `kind` (see [`lock`](Self::lock)).
    pub(crate) fn grant(
        &self,
        name: &str,
        kind: Kind,
        watchdog: bool,
    ) -> Result<LockGuard<C>, LockError> {
        self.settings.validate_kind(kind)?;
        self.settings.validate_wait()?;
        let keys = self.settings.keys_of(name, kind)?;
        let _span = tracing::debug_span!("lock.acquire", lock = %keys.name).entered();
        let settings = &self.settings;
        let now = Instant::now();
        let machine = if settings.queued(&keys) {
            let channel = (self.notifications.as_ref())
                .and_then(|n| n.started())
                .map(|(_, n)| n.handoff_channel(&settings.prefix));
            Acquire::fair(keys, settings, watchdog, channel, now)?
        } else {
            let notifications = self.notifications.is_some();
            Acquire::wait(keys, settings, watchdog, notifications, true, now)
        };
        let granted = self.run(machine)?;
        let granted = granted
            .ok_or_else(|| LockError::InvalidSettings("internal: a wait ended held".into()))?;
        Ok(self.guard(granted))
    }

    fn run(&self, machine: Acquire) -> Result<Option<Granted>, LockError> {
        (self.shared).run(&self.settings, self.notifications.as_deref(), machine)
    }

    /// Runs `work` while holding the lock, with the watchdog on, then releases it.
    /// Sync code cannot be interrupted: if the lease was lost while `work` ran, its
    /// result is discarded and [`LockError::Lost`] is returned; if the release finds it
    /// lost, [`LockError::NotHeld`]. Long work should check [`Lease::is_lost`](crate::Lease::is_lost) as it
    /// goes.
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
    /// let fence = locks.with_lock("ledger", |guard| guard.fencing_token())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_lock<T>(
        &self,
        name: &str,
        work: impl FnOnce(&LockGuard<C>) -> T,
    ) -> Result<T, LockError> {
        let guard = self.grant(name, Kind::Lock, true)?;
        let value = work(&guard);
        if guard.is_lost() {
            return Err(LockError::Lost {
                name: guard.name().to_owned(),
            });
        }
        crate::machine::lease::after_work(name, guard.release(), value)
    }

    fn guard(&self, granted: Granted) -> LockGuard<C> {
        LockGuard::of(&self.shared, granted, &self.settings)
    }
}
