//! The handle's one sync connection ([`Conn`]), each call on it bounded from its start
//! ([`Bounded`]).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::LockError;

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
    pub(crate) fn new(conn: C, reopen: Option<Reopen<C>>, tune: Option<Tune<C>>) -> Self {
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
