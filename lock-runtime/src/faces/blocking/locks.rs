//! [`Locks`], the blocking handle: builder, `try_lock`, `lock`, `with_lock`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::guard::LockGuard;
use crate::LockError;
use crate::exec::blocking::{Conn, Engine, Shared, Tune, read_each};
use crate::faces::handle::Handle;
use crate::machine::acquire::Acquire;
use crate::machine::grant::Granted;
use crate::machine::key::Kind;
use crate::machine::settings::Settings;

/// Acquires distributed locks on one Redis server, without async. Its builder methods
/// (`ttl`, `wait_timeout`...) are [`Handle`](crate::Handle)'s, shared with
/// [`crate::Locks`].
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
pub type Locks<C = redis::Connection> = Handle<Engine<C>>;

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
        let mut conn = open(Duration::from_secs(1)).map_err(|e| LockError::connect(client, e))?;
        conn.set_read_timeout(Some(crate::DEFAULT_RESPONSE_TIMEOUT))?;
        crate::script::functions::lua_probed(redis::ConnectionLike::req_command(
            &mut conn,
            &crate::script::functions::lua_probe(),
        ))
        .map_err(|e| match e {
            LockError::Redis(source) => LockError::connect(client, source),
            other => other,
        })?;
        let tune: Tune<redis::Connection> = Arc::new(|conn, timeout| {
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))
        });
        let conn = Conn::new(conn, Some(Arc::new(open)), Some(tune));
        let locks =
            Self::with_conn(conn.reading_each(Arc::new(read_each))).notifications(client.clone());
        // The background thread and its connection now, while connecting anyway: opened
        // on first use, they would cost the first lock() (or the first guard dropped) a
        // connect of up to a response timeout, beyond its bound when the server is slow.
        locks.engine.shared.worker();
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
        let shared = Shared::new(conn);
        let settings = Arc::new(Settings::default());
        let engine = Engine {
            shared,
            settings,
            notifications: None,
        };
        Handle { engine }
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
        let machine = Acquire::for_try(&self.engine.settings, name, kind, Instant::now())?;
        let granted = self.run(machine)?;
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
        self.grant(name, Kind::Lock, self.engine.settings.watchdog)
    }

    /// Blocks until a grant of `kind` (see [`lock`](Self::lock)).
    pub(crate) fn grant(
        &self,
        name: &str,
        kind: Kind,
        watchdog: bool,
    ) -> Result<LockGuard<C>, LockError> {
        let _span = tracing::debug_span!("lock.acquire", lock = %name).entered();
        let (settings, notifications) = (&self.engine.settings, self.engine.notifications.as_ref());
        // Called only for a queued wait: it starts the notifications' runtime.
        let channel = notifications.map(|n| {
            move || {
                n.started()
                    .map(|(_, n)| n.handoff_channel(&settings.prefix))
            }
        });
        let now = Instant::now();
        let machine = Acquire::for_lock(settings, name, kind, watchdog, channel, true, now)?;
        let granted = self.run(machine)?;
        let granted = granted
            .ok_or_else(|| LockError::InvalidSettings("internal: a wait ended held".into()))?;
        Ok(self.guard(granted))
    }

    fn run(&self, machine: Acquire) -> Result<Option<Granted>, LockError> {
        (self.engine.shared).run(
            &self.engine.settings,
            self.engine.notifications.as_deref(),
            machine,
        )
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
        LockGuard::of(&self.engine.shared, granted, &self.engine.settings)
    }
}
