//! The lock API for code without async: the same surface as [`crate::Locks`], on a
//! sync connection, with a watchdog thread per held lock.
//!
//! Commands go through one sync connection (any `redis::ConnectionLike + Send`) that
//! the handle's clones and watchdog threads share behind a mutex. Release
//! notifications, when enabled, come from a pub/sub connection driven by one
//! background thread; waiters block on them with a timeout.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), lock_runtime::LockError> {
//! let client = redis::Client::open("redis://127.0.0.1:6390/")?;
//! let locks = lock_runtime::blocking::Locks::connect(&client)?
//!     .ttl(Duration::from_secs(30))
//!     .wait_timeout(Duration::from_secs(10));
//! let guard = locks.lock("orders:42")?;
//! println!("fencing token {}", guard.fencing_token());
//! guard.release()?;
//! # Ok(())
//! # }
//! ```

mod guard;

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

pub use guard::LockGuard;

use crate::lock::Attempt;
use crate::notify::{Notifications, Subscription};
use crate::settings::{Keys, Settings, millis, validity};
use crate::token::Token;
use crate::{LockError, builtin};

/// How long a sync connection made by [`Locks::connect`] waits for a reply before
/// failing with an I/O error: a paused or unreachable server cannot hang a caller.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The shared sync connection.
pub(crate) struct Shared<C> {
    conn: Mutex<C>,
}

impl<C: redis::ConnectionLike> Shared<C> {
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut C) -> T) -> T {
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut conn)
    }
}

/// The notification machinery of the async API, run on a private one-thread runtime
/// that starts on first contention.
struct BlockingNotifications {
    client: redis::Client,
    started: OnceLock<Option<(tokio::runtime::Runtime, Notifications)>>,
}

impl BlockingNotifications {
    fn started(&self) -> Option<&(tokio::runtime::Runtime, Notifications)> {
        self.started
            .get_or_init(|| {
                match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("lockscript-notify")
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => Some((runtime, Notifications::new(self.client.clone()))),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the notification thread; waiters poll");
                        None
                    }
                }
            })
            .as_ref()
    }

    fn subscribe(&self, channel: &str) -> Option<Subscription> {
        let (runtime, notifications) = self.started()?;
        runtime.block_on(async {
            let notifier = notifications.get().await?;
            Some(notifier.subscribe(channel).await)
        })
    }

    /// Waits up to `nap` for a release; returns early when one arrives.
    fn wait(&self, subscription: &Subscription, nap: Duration) {
        match self.started() {
            Some((runtime, _)) => {
                // The timer must be made inside the runtime.
                let _ = runtime
                    .block_on(async { tokio::time::timeout(nap, subscription.released()).await });
            }
            None => std::thread::sleep(nap),
        }
    }

    /// Drops `subscription` inside the runtime, which unsubscribes in a task there.
    fn unsubscribe(&self, subscription: Subscription) {
        let _runtime = self.started().map(|(runtime, _)| runtime.enter());
        drop(subscription);
    }
}

/// Acquires distributed locks on one Redis server, without async.
///
/// Cheap to clone; builder methods take and return `Self`; invalid settings are typed
/// errors at the first call.
///
/// ```no_run
/// # fn main() -> Result<(), lock_runtime::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let locks = lock_runtime::blocking::Locks::connect(&client)?;
/// if let Some(guard) = locks.try_lock("reports:daily")? {
///     guard.release()?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct Locks<C = redis::Connection> {
    shared: Arc<Shared<C>>,
    settings: Arc<Settings>,
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
    /// Opens a sync connection (with [`RESPONSE_TIMEOUT`] on reads and writes) and
    /// enables release notifications.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), lock_runtime::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let locks = lock_runtime::blocking::Locks::connect(&client)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect(client: &redis::Client) -> Result<Self, LockError> {
        let conn = client.get_connection_with_timeout(RESPONSE_TIMEOUT)?;
        conn.set_read_timeout(Some(RESPONSE_TIMEOUT))?;
        conn.set_write_timeout(Some(RESPONSE_TIMEOUT))?;
        Ok(Self::new(conn).notifications(client.clone()))
    }
}

impl<C> Locks<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// Uses an existing sync connection. Without
    /// [`notifications`](Self::notifications), waiters poll with the retry policy.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), lock_runtime::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let locks = lock_runtime::blocking::Locks::new(client.get_connection()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(conn: C) -> Self {
        Self {
            shared: Arc::new(Shared {
                conn: Mutex::new(conn),
            }),
            settings: Arc::new(Settings::default()),
            notifications: None,
        }
    }

    crate::settings::settings_builder!("lock_runtime::blocking::Locks");

    /// Wakes waiters when a lock is released, through a pub/sub connection opened from
    /// `client` on first contention and driven by one background thread.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), lock_runtime::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let locks = lock_runtime::blocking::Locks::new(client.get_connection()?)
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

    /// One attempt: `Ok(Some(guard))` when acquired, `Ok(None)` when held.
    ///
    /// ```no_run
    /// # fn f(locks: lock_runtime::blocking::Locks) -> Result<(), lock_runtime::LockError> {
    /// if let Some(guard) = locks.try_lock("reports:daily")? {
    ///     guard.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self, name: &str) -> Result<Option<LockGuard<C>>, LockError> {
        self.settings.validate()?;
        let keys = self.settings.keys(name)?;
        let token = Token::new()?;
        let started = Instant::now();
        match self.attempt(&keys, &token)? {
            Attempt::Acquired { fence, sent } => Ok(Some(self.guard(
                keys,
                token,
                fence,
                sent,
                started,
                1,
                self.settings.watchdog,
            ))),
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// Blocks until the lock is acquired, or [`LockError::Timeout`] after
    /// `wait_timeout`.
    ///
    /// ```no_run
    /// # fn f(locks: lock_runtime::blocking::Locks) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("orders:42")?;
    /// guard.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, name: &str) -> Result<LockGuard<C>, LockError> {
        self.lock_with(name, self.settings.watchdog)
    }

    fn lock_with(&self, name: &str, watchdog: bool) -> Result<LockGuard<C>, LockError> {
        self.settings.validate_wait()?;
        let keys = self.settings.keys(name)?;
        let token = Token::new()?;
        let _span = tracing::debug_span!("lock.acquire", lock = %keys.name).entered();
        let started = Instant::now();
        let deadline = started + self.settings.wait_timeout;
        let mut subscription: Option<Subscription> = None;
        let mut attempts = 0u32;
        let mut waits = 0u32;
        let outcome = loop {
            attempts += 1;
            let remaining = match self.attempt(&keys, &token) {
                Ok(Attempt::Acquired { fence, sent }) => {
                    break Ok(self.guard(keys, token, fence, sent, started, attempts, watchdog));
                }
                Ok(Attempt::Held { remaining }) => remaining,
                Err(e) => break Err(e),
            };
            if subscription.is_none()
                && let Some(notifications) = &self.notifications
                && let Some(sub) = notifications.subscribe(&keys.channel)
            {
                // Subscribed: try once more at once, so a release in between is seen.
                subscription = Some(sub);
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                break Err(LockError::Timeout {
                    name: keys.name.clone(),
                    waited: now - started,
                    attempts,
                });
            }
            let nap = self.settings.retry.nap(waits, remaining, deadline - now);
            waits += 1;
            match (&subscription, &self.notifications) {
                (Some(sub), Some(notifications)) => notifications.wait(sub, nap),
                _ => std::thread::sleep(nap),
            }
        };
        if let (Some(sub), Some(notifications)) = (subscription, &self.notifications) {
            notifications.unsubscribe(sub);
        }
        outcome
    }

    /// Runs `work` while holding the lock, with the watchdog on, then releases it.
    /// Sync code cannot be interrupted: if the lease was lost while `work` ran, its
    /// result is discarded and [`LockError::Lost`] is returned. Long work should check
    /// [`LockGuard::is_lost`] as it goes.
    ///
    /// ```no_run
    /// # fn f(locks: lock_runtime::blocking::Locks) -> Result<(), lock_runtime::LockError> {
    /// let fence = locks.with_lock("ledger", |guard| guard.fencing_token())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_lock<T>(
        &self,
        name: &str,
        work: impl FnOnce(&LockGuard<C>) -> T,
    ) -> Result<T, LockError> {
        let guard = self.lock_with(name, true)?;
        let value = work(&guard);
        if guard.is_lost() {
            return Err(LockError::Lost {
                name: guard.name().to_owned(),
            });
        }
        if let Err(e) = guard.release() {
            tracing::warn!(lock = name, error = %e, "release after with_lock failed");
        }
        Ok(value)
    }

    fn attempt(&self, keys: &Keys, token: &Token) -> Result<Attempt<Instant>, LockError> {
        let sent = Instant::now();
        let reply = self.shared.with(|conn| {
            builtin::acquire(
                &keys.lock,
                &keys.fence,
                token.as_str(),
                millis(self.settings.ttl),
            )
            .invoke(conn)
        })?;
        let attempt = Attempt::from_reply(keys, reply, sent);
        if matches!(attempt, Attempt::Acquired { .. })
            && Instant::now() >= sent + validity(self.settings.ttl)
        {
            // The reply came after the lease it granted had ended: worth nothing.
            let _ = self
                .shared
                .with(|conn| builtin::compare_del(&keys.lock, token.as_str()).invoke(conn));
            return Ok(Attempt::Held { remaining: None });
        }
        Ok(attempt)
    }

    #[allow(clippy::too_many_arguments)]
    fn guard(
        &self,
        keys: Keys,
        token: Token,
        fence: u64,
        sent: Instant,
        started: Instant,
        attempts: u32,
        watchdog: bool,
    ) -> LockGuard<C> {
        LockGuard::start(
            Arc::clone(&self.shared),
            &self.settings,
            guard::Grant {
                keys,
                token,
                fence,
                sent,
                waited: sent.saturating_duration_since(started),
                attempts,
                watchdog,
            },
        )
    }
}
