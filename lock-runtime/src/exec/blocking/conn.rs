//! The handle's one sync connection ([`Conn`]), each call on it bounded from its start
//! ([`Bounded`]).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::LockError;
use crate::machine::call::LeaseCall;
use crate::machine::native::{NativeCommands, Offered};
use crate::machine::reply::Confirmed;

/// Re-opens a connection that broke, within the given time.
pub(crate) type Reopen<C> = Arc<dyn Fn(Duration) -> redis::RedisResult<C> + Send + Sync>;
/// Applies a response timeout to a connection.
pub(crate) type Tune<C> = Arc<dyn Fn(&C, Duration) -> redis::RedisResult<()> + Send + Sync>;

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
    /// What the server offers besides scripts, once asked; asked again after the
    /// connection is re-opened.
    pub(crate) offered: Offered,
}

/// The connection's place while no call has it.
struct Slot<C> {
    /// The connection; `None` while a call has it.
    conn: Option<Held<C>>,
    /// Calls waiting for it. The condvar is signalled only while there are some: a
    /// signal is a futex syscall even with nobody waiting, and every call would pay it.
    waiting: u32,
}

/// The connection with what the calls on it must know of its socket.
struct Held<C> {
    conn: C,
    /// The read timeout last set on the socket (`None`: not known).
    applied: Option<Duration>,
    /// At most this many requests that gave up still have replies to come. The client
    /// reads and skips those replies before the next one, and every read it makes waits
    /// up to the socket's read timeout afresh: so a command with `n` such requests ahead
    /// of it is given the `n + 1`th part of what is left of its call's timeout, which
    /// bounds the whole call (a soak saw a release take 860 ms of a 500 ms bound when an
    /// earlier call's late reply restarted the wait for its own). A request's replies
    /// (a pipeline's too) leave the server together, so each request counts once. Zero
    /// again after any answered command, since replies come in order.
    stale: u32,
}

/// The connection, taken out of its slot for one call; put back on drop.
struct Checkout<'a, C> {
    home: &'a Conn<C>,
    conn: Option<Held<C>>,
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

impl<C: redis::ConnectionLike + Send + 'static> Conn<C> {
    pub(crate) fn new(conn: C, reopen: Option<Reopen<C>>, tune: Option<Tune<C>>) -> Self {
        Self {
            slot: Mutex::new(Slot {
                conn: Some(Held {
                    conn,
                    applied: None,
                    stale: 0,
                }),
                waiting: 0,
            }),
            returned: Condvar::new(),
            reopen,
            tune,
            offered: Offered::default(),
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
        self.call(timeout, false, f)
    }

    /// [`with`](Self::with) for a pipeline whose replies must not share the time evenly:
    /// the watchdog's batch of renewals (many renewals would give each reply a sliver of
    /// the timeout, and a slow server would fail them all) and `wait_for_replicas`'
    /// renewal and `WAIT` (whose reply comes up to its own timeout after the first). The
    /// first read gets the whole share instead; once it times out the client fails the
    /// pipeline's further reads at once (measured: 16 renewals to a stopped server fail
    /// together ~500 ms after they were sent, `tests/tests/suspect.rs`).
    pub(crate) fn with_batch<T>(
        &self,
        timeout: Option<Duration>,
        f: impl FnOnce(&mut Bounded<'_, C>) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        self.call(timeout, true, f)
    }

    fn call<T>(
        &self,
        timeout: Option<Duration>,
        batch: bool,
        f: impl FnOnce(&mut Bounded<'_, C>) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let started = Instant::now();
        let limit = timeout.unwrap_or(crate::DEFAULT_RESPONSE_TIMEOUT);
        let mut turn = self.checkout(started + limit, limit)?;
        let Some(held) = turn.conn.as_mut() else {
            return Err(LockError::no_reply(limit));
        };
        // Without a timeout of its own, a call keeps the last one (or the default).
        let timeout = timeout
            .or(held.applied)
            .unwrap_or(crate::DEFAULT_RESPONSE_TIMEOUT);
        let deadline = started + timeout;
        if !held.conn.is_open()
            && let Some(reopen) = &self.reopen
        {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            held.conn = reopen(left)?;
            held.applied = None;
            held.stale = 0;
            self.offered.forget();
        }
        f(&mut Bounded {
            held,
            tune: self.tune.as_ref(),
            started,
            timeout,
            deadline,
            batch,
        })
    }

    /// A plain lock's renewal or release (`make` builds it for what the server offers),
    /// within `timeout`; see [`Bounded::lease_call`].
    pub(crate) fn lease_call(
        &self,
        native: bool,
        timeout: Option<Duration>,
        make: impl Fn(NativeCommands) -> LeaseCall,
    ) -> Result<Confirmed, LockError> {
        self.with(timeout, |c| {
            c.ask(&self.offered, native);
            let call = make(self.offered.usable(native));
            match c.send(&call) {
                Err(e) if self.offered.failed(&e, call.is_native()) => {
                    c.send(&make(NativeCommands::default()))
                }
                reply => reply,
            }
        })
    }
}

/// The handle's connection during one call: every command is given only what is left of
/// the call's response timeout, shared with the late replies of earlier requests ahead
/// of its own, so a call that needs several commands (EVALSHA, then `SCRIPT LOAD` and
/// EVALSHA after `NOSCRIPT`) or that follows one that gave up still ends within its
/// timeout.
pub(crate) struct Bounded<'a, C> {
    held: &'a mut Held<C>,
    tune: Option<&'a Tune<C>>,
    /// When the call started (its wait for the connection included).
    started: Instant,
    /// The call's response timeout.
    timeout: Duration,
    deadline: Instant,
    /// The watchdog's batch of renewals: its pipeline's first read gets the whole share.
    batch: bool,
}

impl<C: redis::ConnectionLike> Bounded<'_, C> {
    /// Before a command: the socket's read timeout is what is left of the call, shared
    /// with the late replies ahead of its own; an error at once when nothing is left.
    fn budget(&mut self, replies: usize) -> redis::RedisResult<()> {
        let now = Instant::now();
        // redis reads every reply of a pipeline with the socket's timeout afresh, even
        // after one timed out: a pipeline's replies share the call's time too (a soak
        // on Valkey saw a native release, DELIFEQ and its PUBLISH, take 1,029 ms of a
        // 500 ms bound on a silent server). The watchdog's batches keep one share: see
        // `with_batch`.
        let own = if self.batch { 1 } else { replies };
        let own = u32::try_from(own).unwrap_or(u32::MAX);
        let reads = self.held.stale.saturating_add(own);
        // The common case, one reply and none late at the call's start, keeps the
        // timeout already set: no syscall.
        let window = if reads == 1 && now.duration_since(self.started) < Duration::from_millis(1) {
            self.timeout
        } else {
            let left = self.deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no time left within the response timeout for the next command",
                )));
            }
            (left / reads).max(Duration::from_millis(1))
        };
        if let Some(tune) = self.tune
            && self.held.applied != Some(window)
        {
            tune(&self.held.conn, window)?;
            // Only the call's whole timeout is worth remembering: a share is set again.
            self.held.applied = (window == self.timeout).then_some(window);
        }
        Ok(())
    }

    /// After a command: an answer means every earlier reply was read; a timeout leaves
    /// this request's replies to come.
    fn account<T>(&mut self, result: &redis::RedisResult<T>) {
        // A server error is an answer too; only a reply not read leaves one to come.
        if let Err(e) = result
            && (e.is_timeout() || e.is_io_error())
        {
            self.held.stale = self.held.stale.saturating_add(1);
        } else {
            self.held.stale = 0;
        }
    }
}

impl<C: redis::ConnectionLike + 'static> Bounded<'_, C> {
    /// Asks the server what it offers besides scripts, if `native` commands are allowed
    /// and nobody has asked on this connection yet (on a Redis Cluster, every primary:
    /// it uses what all of them offer). An unanswered question is asked again by the
    /// next call.
    pub(crate) fn ask(&mut self, offered: &Offered, native: bool) {
        if !offered.to_ask(native) {
            return;
        }
        #[cfg(feature = "cluster")]
        if (&self.held.conn as &dyn std::any::Any).is::<redis::cluster::ClusterConnection>() {
            // Every primary answers, within the call's time like any command.
            let answers = self.budget(1).and_then(|()| {
                let any = &mut self.held.conn as &mut dyn std::any::Any;
                match any.downcast_mut::<redis::cluster::ClusterConnection>() {
                    Some(c) => {
                        c.route_command(&NativeCommands::ask(), NativeCommands::every_primary())
                    }
                    None => Err((redis::ErrorKind::Client, "not a cluster connection").into()),
                }
            });
            self.account(&answers);
            return offered.answered_by_each(&answers);
        }
        offered.answered(&NativeCommands::ask().query(self));
    }
}

impl<C: redis::ConnectionLike> Bounded<'_, C> {
    /// Sends one lease call. Its native commands go one by one on a connection that
    /// takes no pipeline (a sync Redis Cluster connection), each routed by its key (the
    /// notification, keyless, to any node: a Cluster forwards it to every node).
    pub(crate) fn send(&mut self, call: &LeaseCall) -> Result<Confirmed, LockError> {
        match call {
            LeaseCall::Script(script) => script.invoke(self),
            LeaseCall::Native(cmds) if !redis::ConnectionLike::supports_pipelining(self) => {
                LeaseCall::read(cmds.iter().map(|cmd| cmd.query(self)).collect())
            }
            LeaseCall::Native(cmds) => LeaseCall::read(LeaseCall::native_pipe(cmds).query(self)?),
        }
    }
}

impl<C: redis::ConnectionLike> redis::ConnectionLike for Bounded<'_, C> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.budget(1)?;
        let result = self.held.conn.req_packed_command(cmd);
        self.account(&result);
        result
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.budget(offset + count)?;
        let result = self.held.conn.req_packed_commands(cmd, offset, count);
        self.account(&result);
        result
    }

    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        // Forwarded as a command: a cluster connection routes by it.
        self.budget(1)?;
        let result = self.held.conn.req_command(cmd);
        self.account(&result);
        result
    }

    fn get_db(&self) -> i64 {
        self.held.conn.get_db()
    }

    fn supports_pipelining(&self) -> bool {
        self.held.conn.supports_pipelining()
    }

    fn check_connection(&mut self) -> bool {
        self.held.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.held.conn.is_open()
    }
}
