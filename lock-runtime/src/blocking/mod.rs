//! The lock API for code without async: the same surface as [`crate::Locks`], on a
//! sync connection, over the same lease, grant and wait rules.
//!
//! Commands go through one sync connection (any `redis::ConnectionLike + Send`) that
//! the handle's clones and its background thread take turns on, so the server runs a
//! lease's commands in the order they were sent; each call is bounded by the response
//! timeout from its start, its wait for the connection included (set on the socket by
//! [`Locks::connect`]). One background thread per handle renews leases (every renewal
//! due at once in one round trip) and releases abandoned grants: no thread is started
//! per lock. Release notifications, when enabled, come from a pub/sub connection kept
//! by a small private runtime thread; waiters block on them with a timeout.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), lockscript::LockError> {
//! let client = redis::Client::open("redis://127.0.0.1:6390/")?;
//! let locks = lockscript::blocking::Locks::connect(&client)?
//!     .ttl(Duration::from_secs(30))
//!     .wait_timeout(Duration::from_secs(10));
//! let guard = locks.lock("orders:42")?;
//! println!("fencing token {}", guard.fencing_token());
//! guard.release()?;
//! # Ok(())
//! # }
//! ```

mod guard;
mod rw;
mod worker;

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

pub use guard::LockGuard;
pub use rw::{Permit, ReadGuard, RwLocks, Semaphores, WriteGuard};

use self::worker::Worker;
use crate::LockError;
use crate::fair::{self, Place, Ticket, Turn};
use crate::grant::{Abandoned, Attempted, Grant, Outcome, Pending};
use crate::key::{Keys, Kind};
use crate::lease::LeaseState;
use crate::notify::{Notifications, Subscription};
use crate::settings::{ReplicaWait, Settings};
use crate::token::Token;
use crate::wait::{Progress, Step, Wait};

/// Re-opens a connection that broke, within the given time.
type Reopen<C> = Arc<dyn Fn(Duration) -> redis::RedisResult<C> + Send + Sync>;
/// Applies a response timeout to a connection.
type Tune<C> = Arc<dyn Fn(&C, Duration) -> redis::RedisResult<()> + Send + Sync>;

/// The handle's one sync connection, re-opened after it breaks when the handle made it.
///
/// Every command of the handle goes through it, the background thread's renewals and
/// releases included: the server then runs a lease's commands in the order they were
/// sent, and a background release can never overtake the attempt it cleans up after
/// (a late reply is skipped by the connection, which stays open and in order). Callers
/// take turns on it; a call's response timeout counts from the call's start, the wait
/// for its turn included.
pub(crate) struct Conn<C> {
    slot: Mutex<Slot<C>>,
    /// Signalled when a call gives the connection back while others wait for it.
    returned: Condvar,
    reopen: Option<Reopen<C>>,
    tune: Option<Tune<C>>,
}

/// The connection's place while no call has it.
struct Slot<C> {
    /// The connection and the response timeout last applied to it; `None` while a call
    /// has it.
    conn: Option<(C, Option<Duration>)>,
    /// Calls waiting for it. The condvar is signalled only while there are some: a
    /// signal is a futex syscall even with nobody waiting, and every call would pay it.
    waiting: u32,
}

/// The connection, taken out of its slot for one call; put back on drop.
struct Checkout<'a, C> {
    home: &'a Conn<C>,
    conn: Option<(C, Option<Duration>)>,
}

impl<C> Drop for Checkout<'_, C> {
    fn drop(&mut self) {
        let mut slot = self
            .home
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        slot.conn = self.conn.take();
        if slot.waiting > 0 {
            self.home.returned.notify_one();
        }
    }
}

impl<C: redis::ConnectionLike + Send> Conn<C> {
    fn new(conn: C, reopen: Option<Reopen<C>>, tune: Option<Tune<C>>) -> Self {
        Self {
            slot: Mutex::new(Slot {
                conn: Some((conn, None)),
                waiting: 0,
            }),
            returned: Condvar::new(),
            reopen,
            tune,
        }
    }

    /// The connection, once no other call has it, or a timeout error at `deadline`.
    fn checkout(&self, deadline: Instant, timeout: Duration) -> Result<Checkout<'_, C>, LockError> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(conn) = slot.conn.take() {
                return Ok(Checkout {
                    home: self,
                    conn: Some(conn),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(LockError::not_sent(timeout));
            }
            slot.waiting += 1;
            slot = self
                .returned
                .wait_timeout(slot, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            slot.waiting -= 1;
        }
    }

    /// Runs `f` on the connection, with `timeout` as its response timeout (when the
    /// handle can set it; without one, the last one applied or the default), after
    /// re-opening a broken connection. The timeout bounds the whole call from now: the
    /// wait for the connection, re-opening and every command `f` sends share it (a
    /// script call after `NOSCRIPT` sends more than one).
    pub(crate) fn with<T>(
        &self,
        timeout: Option<Duration>,
        f: impl FnOnce(&mut Bounded<'_, C>) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let started = Instant::now();
        let limit = timeout.unwrap_or(crate::DEFAULT_RESPONSE_TIMEOUT);
        let mut turn = self.checkout(started + limit, limit)?;
        let Some((conn, applied)) = turn.conn.as_mut() else {
            return Err(LockError::no_reply(limit));
        };
        // Without a timeout of its own, a call keeps the last one (or the default).
        let timeout = timeout
            .or(*applied)
            .unwrap_or(crate::DEFAULT_RESPONSE_TIMEOUT);
        let deadline = started + timeout;
        // A call that waited for its turn (or for a re-open) gets only what is left.
        let left = |now: Instant| {
            if now.duration_since(started) < Duration::from_millis(1) {
                timeout
            } else {
                deadline
                    .saturating_duration_since(now)
                    .max(Duration::from_millis(1))
            }
        };
        if !conn.is_open()
            && let Some(reopen) = &self.reopen
        {
            *conn = reopen(left(Instant::now()))?;
            *applied = None;
        }
        let budget = left(Instant::now());
        if let Some(tune) = &self.tune
            && *applied != Some(budget)
        {
            tune(conn, budget)?;
            *applied = (budget == timeout).then_some(timeout);
        }
        f(&mut Bounded {
            conn,
            tune: self.tune.as_ref(),
            applied,
            deadline,
            sent: 0,
        })
    }
}

/// The handle's connection during one call: every command after the first is given only
/// what is left of the call's response timeout, so a call that needs several commands
/// (EVALSHA, then `SCRIPT LOAD` and EVALSHA after `NOSCRIPT`) still ends within it.
pub(crate) struct Bounded<'a, C> {
    conn: &'a mut C,
    tune: Option<&'a Tune<C>>,
    /// The timeout set on the socket, `None` once a command was given less.
    applied: &'a mut Option<Duration>,
    deadline: Instant,
    sent: u32,
}

impl<C: redis::ConnectionLike> Bounded<'_, C> {
    /// Before a command: the first has the call's timeout already; a later one gets what
    /// is left, or fails at once when nothing is.
    fn budget(&mut self) -> redis::RedisResult<()> {
        self.sent += 1;
        if self.sent == 1 {
            return Ok(());
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no time left within the response timeout for the next command",
            )));
        }
        if let Some(tune) = self.tune {
            tune(self.conn, left)?;
            *self.applied = None;
        }
        Ok(())
    }
}

impl<C: redis::ConnectionLike> redis::ConnectionLike for Bounded<'_, C> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.budget()?;
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.budget()?;
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        // Forwarded as a command: a cluster connection routes by it.
        self.budget()?;
        self.conn.req_command(cmd)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn supports_pipelining(&self) -> bool {
        self.conn.supports_pipelining()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

/// What the clones of a handle and its guards share: the connection and the thread.
pub(crate) struct Shared<C> {
    conn: Arc<Conn<C>>,
    worker: OnceLock<Option<Arc<Worker>>>,
}

impl<C: redis::ConnectionLike + Send + 'static> Shared<C> {
    /// The background thread, started on first use.
    fn worker(&self) -> Option<&Arc<Worker>> {
        self.worker
            .get_or_init(|| Worker::start(Arc::clone(&self.conn)))
            .as_ref()
    }

    /// Releases a grant nobody owns in the background, as `settings` say (their
    /// delivery); its TTL frees it if that fails.
    pub(crate) fn release_in_background(&self, abandoned: Abandoned, settings: &Arc<Settings>) {
        if let Some(worker) = self.worker() {
            worker.release(abandoned, Arc::clone(settings));
        } else {
            tracing::debug!("no background thread; the ttl frees the lock");
        }
    }
}

impl<C> Drop for Shared<C> {
    fn drop(&mut self) {
        if let Some(Some(worker)) = self.worker.get() {
            worker.close();
        }
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

    /// Subscribes to `channel`, waiting at most `within` for the confirmation.
    fn subscribe(&self, channel: &str, within: Duration) -> Option<Subscription> {
        let (runtime, notifications) = self.started()?;
        let subscription = {
            let _entered = runtime.enter();
            notifications.subscribe(channel)?
        };
        subscription.live_within_blocking(within);
        Some(subscription)
    }
}

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
        crate::functions::lua_probed(redis::ConnectionLike::req_command(
            &mut conn,
            &crate::functions::lua_probe(),
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
            }),
            settings: Arc::new(Settings::default()),
            notifications: None,
        }
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    crate::settings::settings_builder!("lockscript::blocking::Locks");

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
        let started = Instant::now();
        match self.attempt(&keys, self.settings.response_timeout)? {
            Attempted::Granted { token, grant } => Ok(Some(self.guard(
                keys,
                token,
                grant,
                started,
                self.settings.watchdog,
            ))),
            Attempted::Held { .. } => Ok(None),
        }
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
        if self.settings.queued(&keys) {
            return self.lock_fair(keys, watchdog);
        }
        let started = Instant::now();
        let settings = &self.settings;
        let mut wait = Wait::new(&keys.name, started, settings, self.notifications.is_some());
        let mut subscription: Option<Subscription> = None;
        let mut step = wait.start(started, false);
        let (token, grant) = loop {
            step = match step {
                Step::Attempt => {
                    let now = Instant::now();
                    let Some(limit) = wait.budget(now) else {
                        step = Step::GiveUp(wait.give_up(now));
                        continue;
                    };
                    match wait.attempted(self.attempt(&keys, limit), Instant::now())? {
                        Progress::Granted(token, grant) => break (token, grant),
                        Progress::Next(step) => step,
                    }
                }
                Step::Subscribe { within } => {
                    if let Some(notifications) = &self.notifications {
                        subscription = notifications.subscribe(&keys.channel, within);
                    }
                    wait.attempt()
                }
                Step::Sleep { nap } => {
                    // Timed by the OS either way: the runtime only delivers the wake-up.
                    match &subscription {
                        Some(sub) => {
                            sub.released_within(nap);
                        }
                        None => std::thread::sleep(nap),
                    }
                    wait.attempt()
                }
                Step::GiveUp(e) => return Err(e),
            };
        };
        Ok(self.guard(keys, token, grant, started, watchdog))
    }

    /// `lock()` in fair mode; see the async engine's `wait_fair`.
    fn lock_fair(&self, keys: Keys, watchdog: bool) -> Result<LockGuard<C>, LockError> {
        let started = Instant::now();
        let settings = &self.settings;
        let mut place = self.enter(&keys, fair::claim(settings.ttl, watchdog))?;
        if let (Some(within), Some(mailbox)) = (place.go_live_within(settings), &place.mailbox) {
            mailbox.live_within_blocking(within);
        }
        let mut wait = place.wait(started, settings);
        let mut step = wait.attempt();
        let grant = loop {
            step = match step {
                Step::Attempt => {
                    let sent = Instant::now();
                    let Some(limit) = wait.budget(sent) else {
                        step = Step::GiveUp(wait.give_up(sent));
                        continue;
                    };
                    let reply = self.shared.conn.with(Some(limit), |c| {
                        settings
                            .fair_call(
                                &keys,
                                "acquire",
                                place.ticket.token.as_str(),
                                &place.ticket.ticket,
                                settings.ttl,
                            )
                            .invoke(c)
                    });
                    let result = match reply {
                        Ok(reply) => {
                            match place.called(reply, sent, wait.attempts(), Instant::now()) {
                                Turn::Granted(grant) => break grant,
                                Turn::Late => {
                                    place = self.enter(&keys, place.claim)?;
                                    step = wait.attempt();
                                    continue;
                                }
                                Turn::Queued(pttl) => Ok(Attempted::Held { remaining: pttl }),
                            }
                        }
                        Err(e) => Err(crate::grant::kind_refused(e, &keys)),
                    };
                    match wait.attempted(result, Instant::now())? {
                        Progress::Next(step) => step,
                        Progress::Granted(..) => unreachable!("a refusal is not a grant"),
                    }
                }
                Step::Subscribe { within } => {
                    if let Some(mailbox) = &place.mailbox {
                        mailbox.live_within_blocking(within);
                    }
                    wait.attempt()
                }
                Step::Sleep { nap } => {
                    // Timed by the OS either way: the runtime only delivers the letter.
                    let letter = if let Some(mailbox) = place.mailbox.as_mut() {
                        mailbox.letter_within(nap)
                    } else {
                        std::thread::sleep(nap);
                        None
                    };
                    let now = Instant::now();
                    match letter.and_then(|l| place.handed(&l, wait.attempts(), now)) {
                        Some(Turn::Granted(grant)) => break grant,
                        Some(_) => place = self.enter(&keys, place.claim)?,
                        None => {}
                    }
                    wait.attempt()
                }
                Step::GiveUp(e) => return Err(e),
            };
        };
        let token = place.claimed();
        Ok(self.guard(keys, token, grant, started, watchdog))
    }

    /// A new place in the fair queue of `keys` (see the async engine's `enter`).
    fn enter(&self, keys: &Keys, claim: Duration) -> Result<Place, LockError> {
        let notifications = self.notifications.as_ref().and_then(|n| n.started());
        let channel = notifications.map(|(_, n)| n.handoff_channel(&self.settings.prefix));
        let ticket = Ticket::new(
            Token::new()?,
            claim,
            keys.kind,
            channel.as_deref().unwrap_or("-"),
        );
        let mailbox = notifications
            .zip(channel)
            .and_then(|((runtime, n), channel)| {
                let _entered = runtime.enter();
                n.mailbox(&channel, ticket.token.as_str())
            });
        let (shared, settings) = (Arc::clone(&self.shared), Arc::clone(&self.settings));
        Ok(Place::new(
            keys.clone(),
            ticket,
            claim,
            self.settings.ttl,
            mailbox,
            move |abandoned| shared.release_in_background(abandoned, &settings),
        ))
    }

    /// Runs `work` while holding the lock, with the watchdog on, then releases it.
    /// Sync code cannot be interrupted: if the lease was lost while `work` ran, its
    /// result is discarded and [`LockError::Lost`] is returned; if the release finds it
    /// lost, [`LockError::NotHeld`]. Long work should check [`LockGuard::is_lost`] as it
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
        match guard.release() {
            Ok(()) => Ok(value),
            Err(e @ LockError::NotHeld { .. }) => Err(e),
            Err(e) => {
                tracing::warn!(lock = name, error = %e, "release after with_lock failed; retried in the background");
                Ok(value)
            }
        }
    }

    /// One attempt with a fresh owner token, within `limit`; see the async engine's
    /// `attempt`.
    fn attempt(&self, keys: &Keys, limit: Duration) -> Result<Attempted, LockError> {
        let settings = &self.settings;
        let token = Token::new()?;
        let sent = Instant::now();
        let outcome = {
            let mut pending = Pending::new(keys, &token, sent, settings.ttl, |a| {
                self.shared.release_in_background(a, settings);
            });
            let reply = self.shared.conn.with(Some(limit), |c| {
                settings.acquire_call(keys, token.as_str()).invoke(c)
            });
            let outcome =
                pending.read(reply.map(|r| Outcome::from_reply(r, sent)), settings.ttl)?;
            if let Some(Outcome::Granted { .. }) = outcome
                && let Some((pipe, timeout)) = settings.confirm_pipe(keys, token.as_str())?
            {
                // As the async engine's attempt: the confirmation shares the attempt's
                // response timeout (plus the WAIT timeout), and a grant that ran out
                // meanwhile is no grant either.
                let left = limit
                    .min(settings.response_timeout)
                    .saturating_sub(sent.elapsed())
                    .max(Duration::from_millis(1));
                let reply = self
                    .shared
                    .conn
                    .with(Some(left + timeout), |c| Ok(pipe.query(c)?))?;
                settings.replicated(keys, reply)?;
                if outcome
                    .as_ref()
                    .is_some_and(|o| o.is_late(settings.ttl, Instant::now()))
                {
                    tracing::debug!(lock = %keys.name, "grant confirmed after its validity; released");
                    return Ok(Attempted::Held { remaining: None });
                }
            }
            if outcome.is_some() {
                pending.disarm();
            }
            outcome
        };
        Ok(Attempted::new(keys, token, outcome))
    }

    fn guard(
        &self,
        keys: Keys,
        token: Token,
        grant: Grant,
        started: Instant,
        watchdog: bool,
    ) -> LockGuard<C> {
        let one_node = !keys.kind.shared();
        let lease = LeaseState::of_grant(keys, token, &grant, &self.settings, watchdog, one_node);
        if watchdog && let Some(worker) = self.shared.worker() {
            worker.watch(&lease);
        }
        LockGuard::new(Arc::clone(&self.shared), lease, grant, started)
    }
}
