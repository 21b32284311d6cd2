//! The blocking face's backend: the handle's one sync connection ([`Conn`]), each call
//! on it bounded from its start ([`Bounded`]), and the lock protocol's calls on it (the
//! verbs of the async [`Backend`](crate::exec::backend::Backend), in sync form).

use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::exec::queue::Offer;
use crate::machine::call::{LeaseCall, LeaseCalls, Owner, renewal};
use crate::machine::fair::Ticket;
use crate::machine::grant::{Abandoned, Outcome};
use crate::machine::key::Keys;
use crate::machine::lease::{LeaseState, Sending};
use crate::machine::native::{NativeCommands, Offered, Question};
use crate::machine::reply::Confirmed;
use crate::machine::settings::Settings;
use crate::machine::transact::{self, ClockQuestion, Read, Transaction};
use crate::{Invocation, LockError};

/// Re-opens a connection that broke, within the given time.
pub(crate) type Reopen<C> = Arc<dyn Fn(Duration) -> redis::RedisResult<C> + Send + Sync>;
/// Applies a response timeout to a connection.
pub(crate) type Tune<C> = Arc<dyn Fn(&C, Duration) -> redis::RedisResult<()> + Send + Sync>;
/// Sends a pipeline of `n` commands and reads its `n` replies one by one, each read
/// given what is left until the deadline, the first shared with the requests ahead whose
/// replies are still to come ([`read_each`] for a `redis::Connection`).
pub(crate) type ReadEach<C> = Arc<
    dyn Fn(&mut C, &[u8], usize, u32, Instant) -> redis::RedisResult<Vec<redis::Value>>
        + Send
        + Sync,
>;
/// Has a claimed question asked in the background, bounded by at most the given
/// response timeout (see [`Conn::ask`]).
pub(crate) type AskBeside = Box<dyn Fn(Question, Duration) + Send + Sync>;

/// The answers of the background thread's round trip ([`Conn::renew_all`]): each
/// renewal's (renewed, counting from when; or refused), each release's (whether it
/// deleted).
pub(crate) type RoundReplies = (
    Vec<Result<Option<Instant>, LockError>>,
    Vec<Result<bool, LockError>>,
);

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
    /// Reads a batch's replies one by one, when the handle made the connection.
    read_each: Option<ReadEach<C>>,
    /// What the server offers besides scripts, once asked; asked again after the
    /// connection is re-opened.
    pub(crate) offered: Offered,
    /// Who asks the question when a lease call finds it open: the background thread, in
    /// a turn of its own (see [`Conn::ask`]). Unset, nobody asks and calls stay scripts.
    asker: OnceLock<AskBeside>,
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
            read_each: None,
            offered: Offered::default(),
            asker: OnceLock::new(),
        }
    }

    /// Reads the replies of a batch ([`with_batch`](Self::with_batch)) with `read_each`.
    pub(crate) fn reading_each(mut self, read_each: ReadEach<C>) -> Self {
        self.read_each = Some(read_each);
        self
    }

    /// Sets who asks the question when a lease call finds it open (once).
    pub(crate) fn asked_by(&self, asker: AskBeside) {
        let _ = self.asker.set(asker);
    }

    /// After a lease call (which went with what was known): if native commands are
    /// allowed and the question is open, it is claimed and handed to the asker. After,
    /// not before: the asker takes the connection for a turn of its own, and the call
    /// that found the question open must not wait behind it.
    fn ask_beside(&self, native: bool, timeout: Duration) {
        if let Some(ask) = self.asker.get()
            && let Some(question) = self.offered.claim(native)
        {
            ask(question, timeout);
        }
    }

    /// Asks the server what it offers (every primary of a Redis Cluster), in a turn of
    /// its own on the connection bounded by `timeout`, and remembers the outcome
    /// whatever it is: no answer in time offers nothing, and is not a failure that
    /// opens the question again (a reconnect or a failover met by a call is). The
    /// background thread asks, in the time before its next renewal is due, so the
    /// question never delays one; a call of another thread that wants the connection
    /// meanwhile waits its turn, as it waits for any call.
    pub(crate) fn ask(&self, question: Question, timeout: Duration) {
        match self.call(Some(timeout), false, |c| Ok(c.ask())) {
            Ok(found) => self.offered.answered(question, found),
            // Other calls held the connection all that time: it was not asked.
            Err(e) if !e.may_have_run() => self.offered.withdrawn(question),
            Err(_) => self.offered.answered(question, NativeCommands::default()),
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
    /// renewal and `WAIT` (whose reply comes up to its own timeout after the first). On
    /// a connection the handle made, its replies are read one by one ([`read_each`]),
    /// each given what is left of the call, so the first waits as long as the server
    /// may take and the others fail at once after it timed out (16 renewals to a
    /// silent server are suspect within the bound, `tests/tests/suspect.rs`); on a
    /// connection of the caller's own, its own timeouts bound each read.
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
        let reply = f(&mut Bounded {
            held,
            tune: self.tune.as_ref(),
            read_each: self.read_each.as_ref(),
            started,
            timeout,
            deadline,
            batch,
        });
        if let Err(e) = &reply {
            self.offered.met(e);
        }
        reply
    }

    /// A plain lock's renewal or release (`make` builds it for what the server offers),
    /// within the response timeout: see [`Bounded::lease_calls`].
    fn lease_call(
        &self,
        settings: &Settings,
        make: impl Fn(NativeCommands) -> LeaseCall,
    ) -> Result<Confirmed, LockError> {
        let reply = self.with(Some(settings.response_timeout), |c| {
            let mut replies = c.lease_calls(&self.offered, settings.native, 1, |_, n| make(n));
            replies
                .pop()
                .unwrap_or_else(|| Err(LockError::no_reply(settings.response_timeout)))
        });
        self.ask_beside(settings.native, settings.response_timeout);
        reply
    }
}

/// The lock protocol on this connection: the verbs of the async engine's
/// [`Backend`](crate::exec::backend::Backend), with the same meaning and the same calls
/// (built by [`Settings`]), each bounded by the response timeout (or a shorter `limit`).
impl<C: redis::ConnectionLike + Send + 'static> Conn<C> {
    /// One attempt for `token`, cut at `limit`.
    /// A plain lock's goes as the acquire transaction where the connection takes a
    /// pipeline (not a sync Redis Cluster connection) and the server does not refuse
    /// it (see [`crate::machine::transact`]), a restarted counter raised before the
    /// grant counts; any other as its script. All within `limit`, the transaction's
    /// replies read as a batch's ([`with_batch`](Self::with_batch)): they come together,
    /// and a share of the time each would cut a reply late by a tenth of the bound.
    pub(crate) fn acquire(&self, of: Owner<'_>, limit: Duration) -> Result<Outcome, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token.as_str());
        let sent = Instant::now();
        self.with_batch(Some(limit), |c| {
            let pipelines = redis::ConnectionLike::supports_pipelining(c);
            if pipelines
                && let Some((question, time)) =
                    ClockQuestion::new(settings, keys, &self.offered, transact::local_us())
            {
                let answer = time.query(c).ok();
                question.answered(answer.as_ref(), transact::local_us(), &self.offered);
            }
            let transaction = pipelines
                .then(|| {
                    Transaction::new(settings, keys, token, &self.offered, transact::local_us())
                })
                .flatten();
            if let Some(txn) = transaction {
                let replies = txn.pipe().query(c).map_err(LockError::from);
                let read_at = (sent, Instant::now(), transact::local_us());
                match txn.read(replies, keys, read_at, &self.offered) {
                    Read::Outcome(outcome) => return outcome,
                    Read::Raise { floor } => {
                        let raise = settings.raise_fence_call(keys, floor);
                        return Ok(transact::raised(raise.invoke(c), sent));
                    }
                    Read::Refused => {}
                }
            }
            let reply = settings.acquire_call(keys, token).invoke(c)?;
            Ok(Outcome::from_reply(reply, sent))
        })
    }

    /// With `wait_for_replicas`: renew.lua and `WAIT` in one pipeline within `left` (see
    /// the async [`Backend::confirm`](crate::exec::backend::Backend::confirm)).
    pub(crate) fn confirm(&self, of: Owner<'_>, left: Duration) -> Result<(), LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let Some((pipe, wait)) = settings.confirm_pipe(keys, token.as_str())? else {
            return Ok(());
        };
        // WAIT's reply comes up to its timeout after the renewal's: the pipeline's
        // replies do not share the time evenly.
        let reply = self.with_batch(Some(left + wait), |c| Ok(pipe.query(c)?))?;
        settings.replicated(keys, reply)
    }

    /// fair-queue.lua's `acquire` for `ticket`, cut at `limit`.
    pub(crate) fn fair_acquire(
        &self,
        settings: &Settings,
        keys: &Keys,
        ticket: &Ticket,
        limit: Duration,
    ) -> Result<(i64, i64, i64, i64), LockError> {
        let call = settings.queue_call(keys, ticket);
        self.with(Some(limit), |c| call.invoke(c))
    }

    /// Sets the lease of `token` to `ttl`: the send time when it did.
    pub(crate) fn renew(&self, of: Owner<'_>, ttl: Duration) -> Result<Option<Instant>, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let sent = Instant::now();
        let reply = self.lease_call(settings, |native| {
            settings.renew_call(keys, token.as_str(), ttl, native)
        })?;
        Ok(reply.0.then_some(sent))
    }

    /// The renewals that are due, and the background releases that go with them (the
    /// background thread's round: a release never takes a round trip of its own ahead of
    /// a renewal), in one round trip (a pipeline) where the connection takes one, so a
    /// slow server costs every lease one round trip, not one each in a row. Each call
    /// hears its own answer: one refused or failed call hides no other's.
    pub(crate) fn renew_all(
        &self,
        due: &[(Arc<LeaseState>, Sending)],
        releases: &[(&Settings, &Abandoned)],
    ) -> RoundReplies {
        let timeout = (due
            .first()
            .map(|(lease, _)| lease.settings.response_timeout))
        .or_else(|| releases.first().map(|(s, _)| s.response_timeout));
        let Some(timeout) = timeout else {
            return (Vec::new(), Vec::new());
        };
        let native =
            due.iter().any(|(l, _)| l.settings.native) || releases.iter().any(|(s, _)| s.native);
        let due_count = due.len();
        let calls_count = due_count + releases.len();
        let make = |i: usize, native| {
            if let Some((lease, sending)) = due.get(i) {
                return renewal(lease, sending, native);
            }
            let (settings, abandoned) = releases[i - due_count];
            let native = if settings.native {
                native
            } else {
                NativeCommands::default()
            };
            settings.abandoned_call(abandoned, native)
        };
        let mut sent = Instant::now();
        let replies = self.with_batch(Some(timeout), |c| {
            sent = Instant::now();
            Ok(c.lease_calls(&self.offered, native, calls_count, make))
        });
        self.ask_beside(native, timeout);
        let mut replies = match replies {
            Ok(replies) => replies,
            Err(e) => (0..calls_count).map(|_| Err(e.for_each())).collect(),
        };
        let release_replies = replies.split_off(due_count.min(replies.len()));
        let renewed = (replies.into_iter())
            .map(|r| r.map(|r| r.0.then_some(sent)))
            .collect();
        let deleted = release_replies.into_iter().map(|r| r.map(|r| r.0));
        (renewed, deleted.collect())
    }

    /// Deletes the lock if `token` holds it (waking waiters); whether it did.
    pub(crate) fn release(&self, of: Owner<'_>) -> Result<bool, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let make = |native| settings.release_call(keys, token.as_str(), native);
        Ok(self.lease_call(settings, make)?.0)
    }

    /// Runs a script call answered by `1` (done) or `0` (a read/write lock's downgrade).
    pub(crate) fn check(
        &self,
        settings: &Settings,
        call: &Invocation<Confirmed>,
    ) -> Result<bool, LockError> {
        Ok(self.script(settings, call)?.0)
    }

    /// Runs a script call within the response timeout (an election's record and reads).
    pub(crate) fn script<R: redis::FromRedisValue>(
        &self,
        settings: &Settings,
        call: &Invocation<R>,
    ) -> Result<R, LockError> {
        self.with(Some(settings.response_timeout), |c| call.invoke(c))
    }

    /// Whether `token` holds the lock.
    pub(crate) fn holds(&self, of: Owner<'_>) -> Result<bool, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        self.with(Some(settings.response_timeout), |c| {
            if let Some(call) = settings.holds_call(keys, token.as_str()) {
                return Ok(call.invoke(c)?.0);
            }
            let value: Option<String> = redis::cmd("GET").arg(&keys.lock).query(c)?;
            Ok(value.as_deref() == Some(token.as_str()))
        })
    }

    /// Passes the lock from `of` to the waiter of `offer` (its token, with its lease):
    /// the next holder's fencing token, or `None` if `of` did not hold it.
    pub(crate) fn hand_over(&self, of: Owner<'_>, offer: &Offer) -> Result<Option<u64>, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let (next, ttl) = (offer.token.as_str(), offer.ttl);
        let call = settings.handover_call(keys, token.as_str(), next, ttl);
        Ok(self
            .with(Some(settings.response_timeout), |c| call.invoke(c))?
            .0)
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
    read_each: Option<&'a ReadEach<C>>,
    /// When the call started (its wait for the connection included).
    started: Instant,
    /// The call's response timeout.
    timeout: Duration,
    deadline: Instant,
    /// The watchdog's batch of renewals: its pipeline's first read gets the whole share.
    batch: bool,
}

/// A pipeline of `count` commands (`cmd`, packed) on `conn`, its replies read one by
/// one, each read given what is left until `deadline` (1 ms at least): the first waits
/// as long as the server may take, and once one gets no reply in time the others fail
/// within a millisecond each, each counted by the connection as a reply to skip later.
/// (redis-rs reads every reply of a pipeline with the socket's whole timeout afresh: a
/// batch of 16 renewals to a silent server took 1.4 s of a 500 ms bound.) Replies and
/// errors as `req_packed_commands` gives them: the first read that failed fails the
/// whole. The first read skips the late replies of the `ahead` requests that gave up
/// before it (the client counts them), each request's replies arriving together and
/// each wait of the socket starting afresh: it is given the `ahead + 1`th part of what
/// is left, so those waits together stay within the deadline (a late transaction's
/// replies made the next call wait 908 ms of a 500 ms bound).
pub(crate) fn read_each(
    conn: &mut redis::Connection,
    cmd: &[u8],
    count: usize,
    ahead: u32,
    deadline: Instant,
) -> redis::RedisResult<Vec<redis::Value>> {
    conn.send_packed_command(cmd)?;
    let mut replies = Vec::with_capacity(count);
    let mut first_error = None;
    let mut read = 0;
    while read < count {
        let mut left = deadline.saturating_duration_since(Instant::now());
        if read == 0 {
            left /= ahead.saturating_add(1);
        }
        conn.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match conn.recv_response() {
            // RESP3 pushes come between replies; they answer nothing.
            Ok(redis::Value::Push { .. }) => continue,
            Ok(reply) => replies.push(reply),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        read += 1;
    }
    first_error.map_or(Ok(replies), Err)
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
    /// The server's answer to [`NativeCommands::ask`], within this call's time, read as
    /// what it offers; on a Redis Cluster, every primary's (see
    /// [`NativeCommands::read_every`]).
    fn ask(&mut self) -> NativeCommands {
        #[cfg(feature = "cluster")]
        if (&self.held.conn as &dyn std::any::Any).is::<redis::cluster::ClusterConnection>() {
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
            return NativeCommands::read_every(&answers);
        }
        NativeCommands::read(&NativeCommands::ask().query(self))
    }
}

impl<C: redis::ConnectionLike + 'static> Bounded<'_, C> {
    /// `n` lease calls (`make(i, offered)` builds the `i`th, native where `native`
    /// allows and the server was found to offer it), each answered on its own, in
    /// order, within this call's time, in one round trip where the connection takes a
    /// pipeline; a call refused as a native command goes again as its script, all of
    /// them together ([`LeaseCalls`]). A call refused for now (`READONLY`, `MOVED`...)
    /// has that answer: the connection is the whole handle's, and the watchdog tries
    /// again soon.
    pub(crate) fn lease_calls(
        &mut self,
        offered: &Offered,
        native: bool,
        n: usize,
        make: impl Fn(usize, NativeCommands) -> LeaseCall,
    ) -> Vec<Result<Confirmed, LockError>> {
        let mut calls = LeaseCalls::new(n, false);
        loop {
            let round = calls.round(offered.usable(native), &make);
            if round.is_empty() {
                return calls.answers(self.timeout);
            }
            self.send_round(&mut calls, round, offered);
        }
    }
}

impl<C: redis::ConnectionLike> Bounded<'_, C> {
    /// Sends one round of `calls` and reads it: several in one pipeline where the
    /// connection takes one, else one by one.
    fn send_round(
        &mut self,
        calls: &mut LeaseCalls,
        round: Vec<(usize, LeaseCall)>,
        offered: &Offered,
    ) {
        if round.len() == 1 || !redis::ConnectionLike::supports_pipelining(self) {
            for (i, call) in round {
                let reply = self.send(&call, offered);
                calls.answered(i, reply, offered);
            }
            return;
        }
        let sent =
            LeaseCalls::pipeline(round).and_then(|(pipe, placed)| Ok((pipe.query(self)?, placed)));
        match sent {
            Ok((replies, placed)) => calls.read(&placed, replies, offered),
            Err(e) => calls.failed(&e, offered),
        }
    }

    /// Sends one lease call. Its native commands go in one round trip, each command's
    /// reply its own, or one by one on a connection that takes no pipeline (a sync
    /// Redis Cluster connection), each routed by its key (the notification, keyless, to
    /// any node: a Cluster forwards it to every node).
    pub(crate) fn send(
        &mut self,
        call: &LeaseCall,
        offered: &Offered,
    ) -> Result<Confirmed, LockError> {
        match call {
            LeaseCall::Script(script) => script.invoke(self),
            LeaseCall::Native(cmds) if !redis::ConnectionLike::supports_pipelining(self) => {
                let replies = cmds.iter().map(|cmd| cmd.query(self)).collect();
                LeaseCall::read(replies, offered)
            }
            LeaseCall::Native(cmds) => {
                LeaseCall::read(LeaseCall::native_pipe(cmds).query(self)?, offered)
            }
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
        let result = match self.read_each {
            Some(read_each) if self.batch && offset == 0 => {
                // The socket's timeouts are read_each's now.
                self.held.applied = None;
                read_each(
                    &mut self.held.conn,
                    cmd,
                    count,
                    self.held.stale,
                    self.deadline,
                )
            }
            _ => self.held.conn.req_packed_commands(cmd, offset, count),
        };
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
