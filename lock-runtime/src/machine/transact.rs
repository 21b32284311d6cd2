//! A plain lock's acquire without Lua: the server's own commands in one `MULTI`/`EXEC`,
//! with the meaning of acquire-with-retry.lua, for a quarter of its server time (the
//! performance guide has the figures).
//!
//! ```text
//! MULTI
//!   SET    lock:{name} <token> NX PX <ttl>           the grant, when the lock is free
//!   SET    lock:{name}:fence <start> NX PX <life>    a missing counter starts at <start>
//!   INCR   lock:{name}:fence                         this attempt's number
//!   PEXPIRE lock:{name}:fence <life>                 the counter outlives the grant
//!   PTTL   lock:{name}                               the holder's lease, when refused
//!   EXISTS lock:{name}:holders                       readers or permits of the name?
//!   TIME                                             the server's clock
//! EXEC
//! ```
//!
//! A transaction cannot decide midway, so every command runs whatever the first
//! answers, and the client reads the outcome from all the replies:
//! - **Refused** (the first `SET` answered nil): the holder's remaining lease. The
//!   counter was raised too: a number is skipped, as a fencing token may always skip.
//! - **Granted**: the counter's new value is the fencing token, strictly above every
//!   earlier one; the key holds our token for the lease.
//! - **Granted while readers or permits hold the name** (one name, one kind): the grant
//!   is worth nothing; it comes out as [`Outcome::Undone`], released in the background
//!   with its own token, and the caller gets [`LockError::WrongKind`]. So does a grant
//!   whose counter is not a number (someone wrote the key): its error.
//!
//! **The counter's restart.** The script restarts a missing counter from the server's
//! clock in microseconds (`TIME`), which a transaction cannot put into an argument. The
//! transaction starts it instead at `<start>`: the server's clock as this connection
//! last saw it ([`Offered`]: `TIME` asked alone before the connection's first
//! transaction ([`ClockQuestion`]), and read from every transaction's reply), taken when
//! the reply was read, so never ahead of the server's but for the drift since, plus
//! 1 ms. "Since" is counted on this process's monotonic clock, never its wall clock,
//! which may step (see [`local_us`]). The connection forgets it with every reconnect
//! (the server behind the address may be another one, or have restarted without its
//! data). When the replies show that
//! this attempt created the counter and `TIME` had passed `<start>`, the grant is not
//! handed out until the counter is raised to the server's clock ([`Read::Raise`]:
//! raise-fence.lua, the Redlock step, within the same bound); its new value is the
//! token. So a restarted counter starts at most 1 ms ahead of the server's clock, and
//! tokens rise across restarts as the script's do: a counter moves one per attempt,
//! slower than the clock, and a restart comes after the counter was idle for its lease
//! and the retention, or after the server came back without its data, a reconnect and
//! a `TIME` later. Steps back of the server's clock as large as that idle time are
//! outside the promise, as for the script (the model checker finds a step of exactly
//! the idle time repeating a token, and none below it). The scripts of earlier versions
//! restart it from `TIME`: a rollout that mixes both keeps tokens rising, and the keys,
//! their values and types are the same.
//!
//! **Refusals.** A server that will not queue one of these commands (an ACL without
//! `TIME`, `EXISTS`...) answers `EXECABORT`, and nothing ran: the attempt goes again at
//! once as acquire-with-retry.lua, and the connection stays on the script until it
//! reconnects ([`Offered`]). An ACL without `MULTI` (the least ACL of earlier versions)
//! makes the server run each command alone as it comes; their replies keep the same
//! rules (the grant is the `SET`'s; a later grant increments after it), and the
//! connection moves to the script too. A queued command refused for now (`READONLY`,
//! `MOVED`, `LOADING`) is the attempt's error, as the script's would be, and is retried
//! as one.
//!
//! **A Redis Cluster keeps the script** (both faces). Each primary has its own clock, and
//! the connection's clock question, a keyless `TIME`, goes to any node: a counter
//! restarted on one primary from another's clock could start ahead of its own by their
//! skew, and a stalled primary would hold up every first acquire on the others (a
//! Cluster test found that one: `try_lock` on healthy primaries timed out while one
//! was stopped).

use std::time::Instant;

use redis::Value;

use crate::LockError;
use crate::machine::grant::Outcome;
use crate::machine::key::Keys;
use crate::machine::limit::millis;
use crate::machine::native::{NativeCommands, Offered};
use crate::machine::settings::Settings;

/// How far ahead of the server's clock (as last seen) a restarted counter starts, in
/// microseconds. The clock is learnt from `TIME` when its reply is read, so it is never
/// ahead of the server's (but for the drift since, and the connection learns it again
/// on every transaction and after every reconnect); the transaction reaches the server
/// a little later, and a start the server's clock has passed by then costs the grant a
/// raise (a second round trip): this margin spares that on a local network. A counter
/// so started runs ahead of the server's clock by this at most, far less than any
/// restart takes (a server restarted without its data drops the connection, which asks
/// `TIME` again) and than a counter's idle time before it expires (its lease and the
/// retention): what keeps tokens rising across restarts.
const AHEAD_US: u64 = 1_000;

/// One acquire transaction, built for one attempt.
#[derive(Clone)]
pub(crate) struct Transaction {
    pipe: redis::Pipeline,
    /// Where a missing counter starts (`<start>` above), microseconds.
    start: u64,
    /// This process's clock when it was built, microseconds.
    built: u64,
    /// The lease a grant asks for.
    ttl: std::time::Duration,
}

/// What a transaction's replies say.
pub(crate) enum Read {
    /// The attempt's outcome (or its error: nothing was granted, or the error says that
    /// a grant may exist, as any call's does).
    Outcome(Result<Outcome, LockError>),
    /// Granted, but this attempt restarted the counter below the server's clock: raise
    /// it to at least `floor` (raise-fence.lua); its answer is the fencing token.
    Raise { floor: u64 },
    /// The server would not queue the commands: nothing ran; send the script.
    Refused,
}

/// Whether an attempt of `keys` goes as the transaction: a plain lock, native commands
/// allowed, and the server has not refused the transaction on this connection.
fn goes(settings: &Settings, keys: &Keys, offered: &Offered) -> bool {
    settings.native && !settings.queued(keys) && !offered.refuses_transaction()
}

/// The server's clock, asked once per connection before its first transaction (`TIME`
/// alone), so that the first counter it restarts starts at the server's clock too.
#[derive(Clone)]
pub(crate) struct ClockQuestion {
    /// This process's clock when it was asked, microseconds.
    sent: u64,
}

impl ClockQuestion {
    /// The question and its command, when an attempt of `keys` will go as the
    /// transaction and the connection has not seen the server's clock yet; `local_us`
    /// is this process's clock ([`local_us`]).
    pub(crate) fn new(
        settings: &Settings,
        keys: &Keys,
        offered: &Offered,
        local_us: u64,
    ) -> Option<(Self, redis::Cmd)> {
        if !goes(settings, keys, offered) || offered.server_clock(0).is_some() {
            return None;
        }
        Some((Self { sent: local_us }, redis::cmd("TIME")))
    }

    /// Tells `offered` the server's clock from `reply`, read when this process's clock
    /// showed `received_us` ([`local_us`]); nothing when it failed (the attempt then
    /// goes as the script).
    pub(crate) fn answered(self, reply: Option<&Value>, received_us: u64, offered: &Offered) {
        if let Some(server_us) = reply.and_then(server_time) {
            offered.saw_clock(read_at(self.sent, received_us), server_us);
        }
    }
}

/// When this process read a `TIME` reply of a command it sent at `sent_us`, as the
/// clock is learnt from it: `received_us` (so the server's clock is never taken ahead of
/// itself), or the send time with the defect put back.
fn read_at(sent_us: u64, received_us: u64) -> u64 {
    if crate::machine::mutants::clock_learnt_at_the_send() {
        sent_us
    } else {
        received_us
    }
}

/// This process's monotonic clock in microseconds since its first reading (what the
/// executors give [`ClockQuestion::new`] and [`Transaction::new`]; the model checker
/// gives its own).
///
/// Monotonic, not the wall clock: the server's clock is estimated as the last `TIME`
/// seen plus the time this process counted since, and a wall clock stepped forward after
/// that (NTP correcting a clock that started behind, an operator) would carry the
/// estimate, and a counter restarted from it, ahead of the server's by the step: tokens
/// would then fall when that counter expired and restarted from the server's clock.
/// `Instant` never steps.
pub(crate) fn local_us() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let since = ORIGIN.get_or_init(Instant::now).elapsed();
    let monotonic = u64::try_from(since.as_micros()).unwrap_or(u64::MAX);
    counted(monotonic, || {
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        u64::try_from(wall.unwrap_or_default().as_micros()).unwrap_or(u64::MAX)
    })
}

/// The reading the server's clock is estimated on: this process's `monotonic` clock
/// (microseconds), or its wall clock with the defect put back
/// ([`mutants`](crate::machine::mutants)`::set_wall_clock_estimate`). The executors and
/// the model checker's executor each give their own clocks.
pub(crate) fn counted(monotonic_us: u64, wall_us: impl FnOnce() -> u64) -> u64 {
    if crate::machine::mutants::wall_clock_estimate() {
        wall_us()
    } else {
        monotonic_us
    }
}

impl Transaction {
    /// The transaction for an attempt of `token` on `keys` (a plain lock), built when
    /// this process's clock reads `local_us` ([`local_us`]), or `None` when the script
    /// goes instead: the handle forces scripts (`native_commands(false)`), the server
    /// refused the transaction on this connection, or its clock is not known.
    pub(crate) fn new(
        settings: &Settings,
        keys: &Keys,
        token: &str,
        offered: &Offered,
        local_us: u64,
    ) -> Option<Self> {
        if !goes(settings, keys, offered) {
            return None;
        }
        // Without the server's clock (its question failed), the script: a counter this
        // attempt restarted from this process's clock alone could start ahead of the
        // server's by any amount.
        let start = offered.server_clock(local_us)?.saturating_add(AHEAD_US);
        let built = local_us;
        let life = settings.fence_lifetime(settings.ttl);
        let mut pipe = redis::Pipeline::with_capacity(9);
        pipe.ignore_errors();
        pipe.cmd("MULTI");
        (pipe.cmd("SET").arg(&keys.lock).arg(token))
            .arg("NX")
            .arg("PX")
            .arg(millis(settings.ttl));
        (pipe.cmd("SET").arg(&keys.fence).arg(start))
            .arg("NX")
            .arg("PX")
            .arg(life);
        pipe.cmd("INCR").arg(&keys.fence);
        pipe.cmd("PEXPIRE").arg(&keys.fence).arg(life);
        pipe.cmd("PTTL").arg(&keys.lock);
        pipe.cmd("EXISTS").arg(keys.holders());
        pipe.cmd("TIME");
        pipe.cmd("EXEC");
        Some(Self {
            pipe,
            start,
            built,
            ttl: settings.ttl,
        })
    }

    /// Where a missing counter starts, microseconds (the model checker's server takes
    /// it as data).
    #[cfg(feature = "model")]
    pub(crate) fn start_us(&self) -> u64 {
        self.start
    }

    /// The commands, to send as one pipeline (each reply its own).
    pub(crate) fn pipe(&self) -> &redis::Pipeline {
        &self.pipe
    }

    /// What the replies to [`pipe`](Self::pipe) say, for `keys`, sent at `sent` and read
    /// at `now`, when this process's clock showed `received_us` ([`local_us`]); tells
    /// `offered` the server's clock, or a refusal.
    pub(crate) fn read(
        &self,
        replies: Result<Vec<redis::RedisResult<Value>>, LockError>,
        keys: &Keys,
        (sent, now, received_us): (std::time::Instant, std::time::Instant, u64),
        offered: &Offered,
    ) -> Read {
        let replies = match replies {
            Ok(replies) => replies,
            Err(e) => return Read::Outcome(Err(e)),
        };
        let mut replies = replies.into_iter();
        let multi = replies.next();
        let exec = replies.next_back();
        let queued: Vec<_> = replies.collect();
        if queued.len() != 7 {
            return Read::Outcome(Err(unexpected(&Value::Nil)));
        }
        let results: Vec<redis::RedisResult<Value>> = match (multi, exec) {
            // MULTI refused (an ACL without it): each command ran on its own, as it came.
            // Their replies say what happened just as well (each rule here holds for
            // them one by one: the grant is the SET's, any later grant increments after
            // it), and later attempts on this connection go as the script.
            (Some(Err(refused)), _) => {
                tracing::debug!(error = %refused, "MULTI refused: the acquire's commands ran one by one; using acquire-with-retry.lua from now on");
                offered.refuse_transaction();
                queued
            }
            (_, Some(Ok(Value::Array(results)))) => {
                results.into_iter().map(Value::extract_error).collect()
            }
            (_, Some(Ok(other))) => return Read::Outcome(Err(unexpected(&other))),
            (_, None) => return Read::Outcome(Err(unexpected(&Value::Nil))),
            // EXECABORT: nothing ran. Why is in a queued command's reply.
            (_, Some(Err(aborted))) => {
                let cause = (queued.iter())
                    .find_map(|r| r.as_ref().err().cloned())
                    .map_or_else(|| LockError::from(aborted), LockError::from);
                if NativeCommands::refused(&cause) {
                    tracing::debug!(error = %cause, "the server refused the acquire transaction; using acquire-with-retry.lua");
                    offered.refuse_transaction();
                    return Read::Refused;
                }
                return Read::Outcome(Err(cause));
            }
        };
        let Ok([claim, started, incr, _pexpire, pttl, exists, time]) =
            <[redis::RedisResult<Value>; 7]>::try_from(results)
        else {
            return Read::Outcome(Err(unexpected(&Value::Nil)));
        };
        let claim = match claim {
            Ok(claim) => claim,
            // No grant (a key of another type, a refused write): the attempt's error.
            Err(e) => return Read::Outcome(Err(e.into())),
        };
        let (started, pttl, exists) = (
            started.unwrap_or(Value::Nil),
            pttl.unwrap_or(Value::Nil),
            exists.unwrap_or(Value::Nil),
        );
        let server_us = time.as_ref().ok().and_then(server_time);
        if let Some(server_us) = server_us {
            offered.saw_clock(read_at(self.built, received_us), server_us);
        }
        if matches!(claim, Value::Nil) {
            let remaining = match pttl {
                Value::Int(ms) => u64::try_from(ms).ok().map(std::time::Duration::from_millis),
                _ => None,
            };
            return Read::Outcome(Ok(Outcome::Held { remaining }));
        }
        if !matches!(claim, Value::Okay) {
            return Read::Outcome(Err(unexpected(&claim)));
        }
        // Granted: from here on, a reply that cannot be trusted undoes the grant.
        if matches!(exists, Value::Int(n) if n > 0) {
            let refused = crate::machine::grant::wrong_kind(keys, None);
            return Read::Outcome(Ok(Outcome::Undone(refused)));
        }
        if !matches!(exists, Value::Int(0)) {
            return Read::Outcome(Ok(Outcome::Undone(unexpected(&exists))));
        }
        let fence = match incr {
            Ok(Value::Int(n)) => u64::try_from(n).unwrap_or_default(),
            Ok(other) => return Read::Outcome(Ok(Outcome::Undone(unexpected(&other)))),
            Err(e) => return Read::Outcome(Ok(Outcome::Undone(e.into()))),
        };
        if !matches!(started, Value::Okay) {
            return Read::Outcome(Ok(Outcome::Granted { fence, sent }));
        }
        // This attempt restarted the counter.
        match server_us {
            Some(server_us) if server_us >= self.start => {
                let granted = Outcome::Granted { fence, sent };
                // A grant already past its validity is released, never handed out: not
                // worth a raise (whose round trip could cost the attempt its bound).
                if granted.is_late(self.ttl, now) {
                    return Read::Outcome(Ok(granted));
                }
                Read::Raise {
                    floor: server_us.saturating_add(1),
                }
            }
            Some(_) => Read::Outcome(Ok(Outcome::Granted { fence, sent })),
            // The server's clock unknown: no token is sure to be above every earlier one.
            None => Read::Outcome(Ok(Outcome::Undone(match time {
                Err(e) => e.into(),
                Ok(other) => unexpected(&other),
            }))),
        }
    }
}

/// The outcome of a grant whose counter [`Read::Raise`] raised with `reply` (the
/// counter's value afterwards: the fencing token), sent at `sent`. A raise that failed
/// leaves a grant with no token worth handing out: it is undone.
pub(crate) fn raised(reply: Result<i64, LockError>, sent: std::time::Instant) -> Outcome {
    match reply.map(u64::try_from) {
        Ok(Ok(fence)) if fence > 0 => Outcome::Granted { fence, sent },
        Ok(_) => Outcome::Undone(unexpected(&Value::Nil)),
        Err(e) => Outcome::Undone(e),
    }
}

/// `TIME`'s reply in microseconds.
fn server_time(time: &Value) -> Option<u64> {
    let Value::Array(parts) = time else {
        return None;
    };
    let num = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match parts.as_slice() {
        [s, us] => num(s)?.checked_mul(1_000_000)?.checked_add(num(us)?),
        _ => None,
    }
}

fn unexpected(v: &Value) -> LockError {
    LockError::from(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "an acquire transaction's reply is not MULTI/EXEC's",
        format!("{v:?}"),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn ok_replies(exec: Vec<Value>) -> Vec<redis::RedisResult<Value>> {
        let mut replies = vec![Ok(Value::Okay)];
        replies.extend((0..7).map(|_| Ok(Value::SimpleString("QUEUED".into()))));
        replies.push(Ok(Value::Array(exec)));
        replies
    }

    fn time(us: u64) -> Value {
        let bulk = |n: u64| Value::BulkString(n.to_string().into_bytes());
        Value::Array(vec![bulk(us / 1_000_000), bulk(us % 1_000_000)])
    }

    fn txn(start: u64) -> Transaction {
        Transaction {
            pipe: redis::Pipeline::new(),
            start,
            built: start,
            ttl: std::time::Duration::from_secs(30),
        }
    }

    #[test]
    fn replies_read_as_grant_refusal_kind_and_restart() {
        let keys = Settings::default().keys("orders").unwrap();
        let offered = Offered::default();
        let now = Instant::now();
        let read = |t: &Transaction, exec| {
            t.read(Ok(ok_replies(exec)), &keys, (now, now, 9_400_000), &offered)
        };
        let (ok, nil, int) = (Value::Okay, Value::Nil, Value::Int);
        // Free, the counter alive: granted with INCR's value.
        let r = read(
            &txn(5_000_000),
            vec![
                ok.clone(),
                nil.clone(),
                int(42),
                int(1),
                int(30_000),
                int(0),
                time(5_000_000),
            ],
        );
        assert!(matches!(
            r,
            Read::Outcome(Ok(Outcome::Granted { fence: 42, .. }))
        ));
        // Held: the holder's PTTL.
        let r = read(
            &txn(5_000_000),
            vec![
                nil.clone(),
                nil.clone(),
                int(43),
                int(1),
                int(1_200),
                int(0),
                time(5_000_000),
            ],
        );
        assert!(matches!(
            r,
            Read::Outcome(Ok(Outcome::Held { remaining: Some(d) })) if d.as_millis() == 1_200
        ));
        // Readers hold the name: the grant is undone, the error says which kind.
        let r = read(
            &txn(5_000_000),
            vec![
                ok.clone(),
                nil.clone(),
                int(44),
                int(1),
                int(30_000),
                int(1),
                time(5_000_000),
            ],
        );
        assert!(matches!(
            r,
            Read::Outcome(Ok(Outcome::Undone(LockError::WrongKind { .. })))
        ));
        // This attempt restarted the counter, its start behind the server's clock:
        // raised to the server's clock before it counts.
        let r = read(
            &txn(4_000_000),
            vec![
                ok.clone(),
                ok.clone(),
                int(4_000_001),
                int(1),
                int(30_000),
                int(0),
                time(9_000_000),
            ],
        );
        assert!(matches!(r, Read::Raise { floor: 9_000_001 }));
        // Restarted ahead of the server's clock: the token stands as it is.
        let r = read(
            &txn(9_500_000),
            vec![
                ok.clone(),
                ok,
                int(9_500_001),
                int(1),
                int(30_000),
                int(0),
                time(9_000_000),
            ],
        );
        assert!(matches!(
            r,
            Read::Outcome(Ok(Outcome::Granted {
                fence: 9_500_001,
                ..
            }))
        ));
        // The connection learnt the server's clock: a process behind it starts counters
        // at the server's clock from now on.
        assert!(offered.server_clock(9_500_000).unwrap() >= 9_000_000);
    }

    #[test]
    fn a_refused_command_sends_the_script_and_another_error_is_the_attempts() {
        use redis::ServerErrorKind::{ExecAbort, NoPerm, ReadOnly};
        let keys = Settings::default().keys("orders").unwrap();
        let offered = Offered::default();
        let err = |kind, detail: &str| -> redis::RedisResult<Value> {
            Err(redis::RedisError::from((
                redis::ErrorKind::Server(kind),
                "server error",
                detail.to_owned(),
            )))
        };
        let aborted = |cause: redis::RedisResult<Value>| {
            let mut replies = vec![Ok(Value::Okay), Ok(Value::SimpleString("QUEUED".into()))];
            replies.push(cause);
            replies.extend((0..5).map(|_| Ok(Value::SimpleString("QUEUED".into()))));
            replies.push(err(
                ExecAbort,
                "Transaction discarded because of previous errors.",
            ));
            Ok(replies)
        };
        let now = Instant::now();
        let r = txn(1).read(
            aborted(err(
                NoPerm,
                "this user has no permissions to run the 'time' command",
            )),
            &keys,
            (now, now, 1),
            &offered,
        );
        assert!(matches!(r, Read::Refused), "a NOPERM sends the script");
        assert!(offered.refuses_transaction());
        let offered = Offered::default();
        let r = txn(1).read(
            aborted(err(
                ReadOnly,
                "You can't write against a read only replica.",
            )),
            &keys,
            (now, now, 1),
            &offered,
        );
        assert!(matches!(r, Read::Outcome(Err(_))));
        assert!(!offered.refuses_transaction());
    }

    /// MULTI refused (an ACL of an earlier version): the server ran each command as it
    /// came; their replies are read the same way, and the connection moves to the script.
    #[test]
    fn commands_that_ran_one_by_one_read_as_the_transaction() {
        let keys = Settings::default().keys("orders").unwrap();
        let offered = Offered::default();
        let refused = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "server error",
            "this user has no permissions to run the 'multi' command".to_owned(),
        ));
        let exec = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "server error",
            "EXEC without MULTI".to_owned(),
        ));
        let mut replies = vec![Err(refused)];
        replies.extend(
            [
                Value::Okay,
                Value::Nil,
                Value::Int(77),
                Value::Int(1),
                Value::Int(30_000),
                Value::Int(0),
                time(5_000_000),
            ]
            .map(Ok),
        );
        replies.push(Err(exec));
        let r = txn(5_000_000).read(
            Ok(replies),
            &keys,
            (Instant::now(), Instant::now(), 5_000_000),
            &offered,
        );
        assert!(matches!(
            r,
            Read::Outcome(Ok(Outcome::Granted { fence: 77, .. }))
        ));
        assert!(offered.refuses_transaction(), "the script from now on");
    }
}
