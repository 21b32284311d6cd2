//! The server's own conditional commands, where it has them: `SET key token IFEQ token
//! PX ttl` renews a plain lock's lease and `DELIFEQ key token` (or `DELEX key IFEQ
//! token`) releases it, each about a quarter of a script's server time (the guide's
//! performance page has the figures).
//!
//! What a server offers is asked of it ([`NativeCommands::ask`]: `COMMAND DOCS`),
//! never guessed from a version string, and the lease calls go with what is known
//! ([`Offered`]): the first renewal or release on a connection goes as its script while
//! the question is asked beside it, bounded on its own, so no call ever waits for the
//! question, and one server that stalls costs only the calls sent to it. A Redis
//! Cluster's primaries are all asked at once and the cluster uses only what every one
//! of them offers; one that does not answer within the question's bound offers
//! nothing. The outcome is remembered whatever it is, and the question opened again
//! after any call on the connection (an acquire as much as a renewal) failed the way a
//! reconnect or a failover does: the server behind the address may be another one now.
//! A server that refuses a native command (it lacks it after all, or an ACL denies it),
//! told by that command's own reply whatever the others in its round trip answered,
//! proves the command did not run: the call is sent again as the script at once, and
//! the connection stays on scripts until the question is opened again.
//!
//! The meaning is the scripts' exactly: a renewal or release of a key that is not ours
//! changes nothing and answers "not held"; an error reply means not done. A release's
//! outcome is its delete's reply: the notification sent beside it never undoes or
//! repeats it, and one refused (a user without the channel or `PUBLISH`) is logged once
//! per handle while waiters poll. Only a plain lock's renewal and release are native
//! here; its acquire is a transaction of commands every server has
//! ([`crate::machine::transact`]); handover, the fair queue and guarded scripts stay
//! scripts.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};

use redis::Value;

use crate::LockError;

/// The native commands a server offers for a plain lock's renewal and release, as it
/// answered `COMMAND DOCS`. What a handle found is on
/// [`Locks::offered_commands`](crate::Locks::offered_commands) (for logs and tests).
///
/// ```
/// let found = lockscript::NativeCommands::default();
/// assert!(!found.renews() && !found.releases());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct NativeCommands {
    /// `SET … IFEQ` (Valkey 8.1, Redis 8.4): renewals.
    pub set_ifeq: bool,
    /// `DELIFEQ` (Valkey 9.0): releases.
    pub delifeq: bool,
    /// `DELEX … IFEQ` (Redis 8.4, Valkey 9.2): releases.
    pub delex_ifeq: bool,
}

impl NativeCommands {
    /// Whether renewals of a plain lock go native.
    #[must_use]
    pub fn renews(&self) -> bool {
        self.set_ifeq
    }

    /// Whether releases of a plain lock go native.
    #[must_use]
    pub fn releases(&self) -> bool {
        self.delifeq || self.delex_ifeq
    }

    /// The question, as one command (one reply, so one read, bounded like any call):
    /// `COMMAND DOCS SET DELEX DELIFEQ`, which documents each command the server has
    /// (and `IFEQ` among the arguments of `SET` and `DELEX` where it takes it), and
    /// leaves out the others.
    pub(crate) fn ask() -> redis::Cmd {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("DOCS").arg("SET").arg("DELEX").arg("DELIFEQ");
        cmd
    }

    /// Where [`ask`](Self::ask) goes on a Redis Cluster: to every primary at once, each
    /// answering for itself (see [`read_every`](Self::read_every)).
    #[cfg(feature = "cluster")]
    pub(crate) fn every_primary() -> redis::cluster_routing::RoutingInfo {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None))
    }

    /// What the server's answer to [`ask`](Self::ask) says it offers. An answer that is
    /// an error (a server before 7.0 has no `COMMAND DOCS`; an ACL may deny `COMMAND`)
    /// or never came (no reply within the question's bound, a broken connection) offers
    /// nothing.
    pub(crate) fn read(answer: &redis::RedisResult<Value>) -> Self {
        let docs = answer.as_ref().ok();
        let doc = |command: &str| docs.and_then(|d| doc_of(d, command));
        let takes_ifeq = |command: &str| doc(command).is_some_and(|d| mentions(d, "IFEQ"));
        Self {
            set_ifeq: takes_ifeq("set"),
            delifeq: doc("delifeq").is_some(),
            delex_ifeq: takes_ifeq("delex"),
        }
    }

    /// What every node offers, from each node's answer to [`ask`](Self::ask) (a Redis
    /// Cluster's primaries): a command one of them lacks is not used on any, since a
    /// lease's key may live on that node, and a slot may move to it.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn read_each(answers: impl IntoIterator<Item = Value>) -> Self {
        answers
            .into_iter()
            .map(|answer| Self::read(&Ok(answer)))
            .reduce(|a, b| Self {
                set_ifeq: a.set_ifeq && b.set_ifeq,
                delifeq: a.delifeq && b.delifeq,
                delex_ifeq: a.delex_ifeq && b.delex_ifeq,
            })
            .unwrap_or_default()
    }

    /// What a Redis Cluster offers, from the answers of its primaries to one question
    /// sent to all of them ([`every_primary`](Self::every_primary): a map of node
    /// address to answer). A primary that did not answer within the question's bound,
    /// or answered an error, offers nothing, and so does the cluster (see
    /// [`read_each`](Self::read_each)): one missing answer decides the whole, which is
    /// why the primaries are asked at once and the question is bounded as one.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn read_every(answers: &redis::RedisResult<Value>) -> Self {
        match answers {
            Ok(Value::Map(by_node)) => Self::read_each(by_node.iter().map(|(_, a)| a.clone())),
            other => Self::read(other),
        }
    }

    /// Whether `error`, the reply to a native command, proves the server will not run
    /// it: an unknown command, a syntax it does not take, or an ACL refusal. The
    /// command did not run; the script is sent instead.
    pub(crate) fn refused(error: &LockError) -> bool {
        let LockError::Redis(e) = error else {
            return false;
        };
        if crate::machine::mutants::native_refusal_unseen() {
            return false;
        }
        match e.code() {
            Some("NOPERM") => true,
            Some("ERR") => e.detail().is_some_and(|d| {
                let d = d.to_ascii_lowercase();
                d.contains("unknown command") || d.contains("syntax error")
            }),
            _ => false,
        }
    }
}

/// `COMMAND DOCS`'s entry for `command`: a map (RESP3) or a flat list of name, doc.
fn doc_of<'a>(docs: &'a Value, command: &str) -> Option<&'a Value> {
    let is = |v: &Value| {
        matches!(v, Value::BulkString(b) if b.eq_ignore_ascii_case(command.as_bytes()))
            || matches!(v, Value::SimpleString(s) if s.eq_ignore_ascii_case(command))
    };
    match docs {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| is(k)).map(|(_, v)| v),
        Value::Array(flat) => flat
            .chunks(2)
            .find(|pair| pair.first().is_some_and(is))
            .and_then(|pair| pair.get(1)),
        _ => None,
    }
}

/// Whether `word` is a string anywhere inside `value`.
fn mentions(value: &Value, word: &str) -> bool {
    match value {
        Value::BulkString(b) => b.eq_ignore_ascii_case(word.as_bytes()),
        Value::SimpleString(s) => s.eq_ignore_ascii_case(word),
        Value::Array(items) | Value::Set(items) => items.iter().any(|v| mentions(v, word)),
        Value::Map(pairs) => pairs
            .iter()
            .any(|(k, v)| mentions(k, word) || mentions(v, word)),
        _ => false,
    }
}

/// What one connection's server offers, and where the question stands; shared by the
/// clones of a handle. I/O-free: the executors ask, this remembers.
///
/// The question is **open** (nobody asked since the connection was made or re-opened
/// by a reconnect or a failover), **out** (one question on its way, at most one at a
/// time) or **answered**. A lease call never waits for it: it goes with what is
/// answered, and with scripts, which every server runs, while nothing is; the call
/// that finds the question open [`claim`](Self::claim)s it and its executor asks
/// beside it, bounded by a timeout of its own. Whatever that question's outcome, it is
/// remembered ([`answered`](Self::answered)): no answer within its bound counts as
/// offering nothing, so a server that stalls is not asked again by every call, each of
/// which would wait for it. Only a failure that a reconnect or a failover explains,
/// met by any call on the connection, an acquire's included ([`met`](Self::met)),
/// opens the question again.
#[derive(Debug)]
pub(crate) struct Offered {
    /// The flags below in the low byte; above them, how many questions were claimed
    /// (so an answer that comes after the question was opened again is left out).
    state: AtomicU32,
    /// A release notification was refused, and said so (once per handle).
    told: AtomicBool,
    /// The server refused to queue the acquire transaction (an ACL without one of its
    /// commands): acquires go as acquire-with-retry.lua until the connection is re-made
    /// (see [`crate::machine::transact`]).
    no_transaction: AtomicBool,
    /// A Redis Cluster connection: acquires always go as the script (see
    /// [`crate::machine::transact`]: each primary has its own clock, and a keyless
    /// `TIME` goes to any node).
    cluster: bool,
    /// The server's clock minus this process's, in microseconds, as the last `TIME`
    /// seen on the connection put it (taken when its reply was read: never ahead of the
    /// server's but for the drift since); [`UNKNOWN`] before any.
    clock_offset: AtomicI64,
}

/// No `TIME` seen yet.
const UNKNOWN: i64 = i64::MIN;

impl Default for Offered {
    fn default() -> Self {
        Self {
            state: AtomicU32::default(),
            told: AtomicBool::default(),
            no_transaction: AtomicBool::default(),
            cluster: false,
            clock_offset: AtomicI64::new(UNKNOWN),
        }
    }
}

/// The answer is known (with the commands below).
const ANSWERED: u32 = 1;
const SET_IFEQ: u32 = 2;
const DELIFEQ: u32 = 4;
const DELEX_IFEQ: u32 = 8;
/// A question is on its way.
const OUT: u32 = 16;
/// The question was opened again while one was out: that one's answer is left out.
const REOPENED: u32 = 32;
const FLAGS: u32 = 0xff;
/// One claimed question, in [`Offered::state`]'s counter.
const CLAIMED: u32 = 0x100;

/// A question claimed by [`Offered::claim`], to answer with [`Offered::answered`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a claimed question stays out until it is answered"]
pub(crate) struct Question {
    /// The claim's count, which [`Offered::answered`] checks.
    claim: u32,
}

impl Offered {
    /// What the server was found to offer; `None` while the question is open or out.
    pub(crate) fn get(&self) -> Option<NativeCommands> {
        let state = self.state.load(Ordering::Relaxed);
        (state & ANSWERED != 0).then(|| commands(state))
    }

    /// The commands a lease call may use: none when the handle forces scripts or no
    /// answer is known (scripts, which every server runs, until one is).
    pub(crate) fn usable(&self, native: bool) -> NativeCommands {
        self.get().filter(|_| native).unwrap_or_default()
    }

    /// The question, for a lease call that finds it open and native commands allowed
    /// (`native`): the caller's executor asks it beside the call, bounded on its own,
    /// and gives the outcome to [`answered`](Self::answered). `None` when it is out or
    /// answered already, or the handle forces scripts.
    pub(crate) fn claim(&self, native: bool) -> Option<Question> {
        if !native {
            return None;
        }
        let open = |state: u32| state & (ANSWERED | OUT) == 0;
        let claimed = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |state| {
                open(state).then(|| (state & !FLAGS).wrapping_add(CLAIMED) | OUT)
            })
            .ok()?;
        Some(Question {
            claim: (claimed & !FLAGS).wrapping_add(CLAIMED),
        })
    }

    /// Remembers the outcome of `question` (see [`NativeCommands::ask`]), whatever it
    /// is: an error reply, no reply within its bound or a broken connection all offer
    /// nothing (on a Redis Cluster, see [`NativeCommands::read_every`]). Left out when
    /// the question was opened again meanwhile (the server may be another one now):
    /// then it is open again.
    pub(crate) fn answered(&self, question: Question, found: NativeCommands) {
        let _ = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |state| {
                let ours = state & OUT != 0 && state & !FLAGS == question.claim;
                if !ours {
                    return None;
                }
                let counter = state & !FLAGS;
                Some(if state & REOPENED != 0 {
                    counter
                } else {
                    counter | ANSWERED | bits(found)
                })
            });
    }

    /// `question` was never sent (its executor found no turn for it in time): the
    /// question is open again, for the next lease call to claim.
    #[cfg_attr(not(feature = "blocking"), allow(dead_code))]
    pub(crate) fn withdrawn(&self, question: Question) {
        let _ = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |state| {
                let ours = state & OUT != 0 && state & !FLAGS == question.claim;
                ours.then_some(state & !FLAGS)
            });
    }

    /// Remembers `found` at once, dropping any question out: a native command the
    /// server refused proves more than an answer on its way could.
    pub(crate) fn set(&self, found: NativeCommands) {
        let _ = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |state| {
                Some((state & !FLAGS) | ANSWERED | bits(found))
            });
    }

    /// After a lease call failed with `error`: a refused native command keeps the
    /// connection on scripts (whether to send the script now: `true`); otherwise see
    /// [`met`](Self::met).
    pub(crate) fn failed(&self, error: &LockError, was_native: bool) -> bool {
        if was_native && NativeCommands::refused(error) {
            tracing::debug!(%error, "the server refused a native command; using scripts");
            self.set(NativeCommands::default());
            return true;
        }
        self.met(error);
        false
    }

    /// After any call on the connection failed with `error` (an acquire's too): a
    /// failure that a reconnect or a failover explains (no reply, a broken connection,
    /// `READONLY`, `MOVED`, `LOADING`...) opens the question again, since the server
    /// behind the address may be another one now. The question's own failures never
    /// come here: they are its outcome.
    pub(crate) fn met(&self, error: &LockError) {
        if error.is_transient() {
            self.forget();
        }
    }

    /// A release notification, sent beside a native release, failed with `error`: the
    /// release stands (its outcome is the delete's reply) and waiters poll. Said once per
    /// handle: every release of a user without the channel would say it again.
    pub(crate) fn notification_failed(&self, error: &redis::RedisError) {
        if !self.told.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                %error,
                "a release notification was refused (PUBLISH on lock:{{name}}:released); \
                 releases are done all the same and waiters poll; grant the lock user \
                 +publish and the channels (&lock:*) to wake them at once"
            );
        }
    }

    /// Whether the server refused the acquire transaction on this connection.
    pub(crate) fn refuses_transaction(&self) -> bool {
        self.cluster || self.no_transaction.load(Ordering::Relaxed)
    }

    /// What a Redis Cluster connection offers: no acquire transaction, ever (see
    /// [`crate::machine::transact`]).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn cluster() -> Self {
        Self {
            cluster: true,
            ..Self::default()
        }
    }

    /// The server refused to queue the acquire transaction: acquires go as the script
    /// until the connection is re-made ([`forget`](Self::forget)).
    pub(crate) fn refuse_transaction(&self) {
        self.no_transaction.store(true, Ordering::Relaxed);
    }

    /// What the server's clock reads when this process's reads `local_us`, by the last
    /// `TIME` seen, in microseconds; `None` before any.
    pub(crate) fn server_clock(&self, local_us: u64) -> Option<u64> {
        match self.clock_offset.load(Ordering::Relaxed) {
            UNKNOWN => None,
            offset => Some(local_us.saturating_add_signed(offset)),
        }
    }

    /// A `TIME` of `server_us` was read when this process's clock showed `received_us`:
    /// the server's clock read it before the reply left, so the offset learnt puts the
    /// server's clock, if anything, behind (by the reply's way back), never ahead.
    pub(crate) fn saw_clock(&self, received_us: u64, server_us: u64) {
        let offset = i128::from(server_us) - i128::from(received_us);
        let offset = i64::try_from(offset).unwrap_or(UNKNOWN).max(UNKNOWN + 1);
        self.clock_offset.store(offset, Ordering::Relaxed);
    }

    /// The server may have changed (a reconnect, a failover): the question is open
    /// again, and a question out now is answered for the server that was.
    pub(crate) fn forget(&self) {
        self.no_transaction.store(false, Ordering::Relaxed);
        // Another server may be behind the address, with another clock.
        self.clock_offset.store(UNKNOWN, Ordering::Relaxed);
        let _ = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |state| {
                let counter = state & !FLAGS;
                Some(if state & OUT != 0 {
                    counter | OUT | REOPENED
                } else {
                    counter
                })
            });
    }
}

#[cfg(feature = "model")]
impl Offered {
    /// A copy that goes on alone (the model checker's branches).
    pub(crate) fn fork(&self) -> Self {
        Self {
            state: AtomicU32::new(self.state.load(Ordering::Relaxed)),
            told: AtomicBool::new(self.told.load(Ordering::Relaxed)),
            no_transaction: AtomicBool::new(self.no_transaction.load(Ordering::Relaxed)),
            cluster: self.cluster,
            clock_offset: AtomicI64::new(self.clock_offset.load(Ordering::Relaxed)),
        }
    }

    /// Everything a later call can depend on (the model checker tells states apart by
    /// it).
    pub(crate) fn digest<H: std::hash::Hasher>(&self, state: &mut H) {
        std::hash::Hash::hash(&self.state.load(Ordering::Relaxed), state);
        std::hash::Hash::hash(&self.no_transaction.load(Ordering::Relaxed), state);
    }
}

/// The commands among `state`'s flags.
fn commands(state: u32) -> NativeCommands {
    NativeCommands {
        set_ifeq: state & SET_IFEQ != 0,
        delifeq: state & DELIFEQ != 0,
        delex_ifeq: state & DELEX_IFEQ != 0,
    }
}

/// `found` as [`Offered::state`]'s flags.
fn bits(found: NativeCommands) -> u32 {
    let bit = |on: bool, bit: u32| if on { bit } else { 0 };
    bit(found.set_ifeq, SET_IFEQ) | bit(found.delifeq, DELIFEQ) | bit(found.delex_ifeq, DELEX_IFEQ)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn answers_of_each_server_read_as_what_it_offers() {
        let set_doc = |extra: &[&str]| {
            let mut args = vec![bulk("key"), bulk("value"), bulk("NX"), bulk("XX")];
            args.extend(extra.iter().map(|s| bulk(s)));
            Value::Array(vec![bulk("arguments"), Value::Array(args)])
        };
        // Redis 7.0: SET without IFEQ, no DELEX, no DELIFEQ (left out of the answer).
        let redis7 = Ok(Value::Array(vec![bulk("set"), set_doc(&[])]));
        assert_eq!(NativeCommands::read(&redis7), NativeCommands::default());
        // Valkey 9.1 (RESP3 map): SET IFEQ and DELIFEQ, no DELEX.
        let valkey = Ok(Value::Map(vec![
            (bulk("set"), set_doc(&["IFEQ"])),
            (bulk("delifeq"), Value::Array(vec![bulk("summary")])),
        ]));
        let found = NativeCommands::read(&valkey);
        assert!(found.renews() && found.releases() && !found.delex_ifeq);
        // Redis 8.4: SET IFEQ and DELEX IFEQ.
        let redis84 = Ok(Value::Array(vec![
            bulk("set"),
            set_doc(&["ifeq"]),
            bulk("delex"),
            Value::Array(vec![bulk("IFEQ")]),
        ]));
        let found = NativeCommands::read(&redis84);
        assert!(found.set_ifeq && found.delex_ifeq && !found.delifeq);
        // A Cluster uses what every primary offers.
        let each = NativeCommands::read_each([
            valkey.as_ref().unwrap().clone(),
            redis84.as_ref().unwrap().clone(),
        ]);
        assert!(each.set_ifeq && !each.delifeq && !each.delex_ifeq);
        assert_eq!(NativeCommands::read_each([]), NativeCommands::default());
        // A refused question offers nothing.
        let refused = Err(redis::RedisError::from((redis::ErrorKind::Io, "gone")));
        assert_eq!(NativeCommands::read(&refused), NativeCommands::default());
    }

    const BOTH: NativeCommands = NativeCommands {
        set_ifeq: true,
        delifeq: true,
        delex_ifeq: false,
    };

    fn error(kind: redis::ErrorKind, text: &'static str) -> LockError {
        LockError::Redis(redis::RedisError::from((kind, text)))
    }

    #[test]
    fn a_refused_native_command_keeps_the_connection_on_scripts_until_asked_again() {
        let offered = Offered::default();
        offered.set(BOTH);
        assert!(offered.usable(true).renews());
        assert!(!offered.usable(false).renews(), "the handle forces scripts");
        let unknown = LockError::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "unknown command",
            "unknown command 'DELIFEQ'".to_owned(),
        )));
        assert!(
            !offered.failed(&unknown, false),
            "a script's error is its own"
        );
        assert!(offered.failed(&unknown, true));
        assert_eq!(offered.get(), Some(NativeCommands::default()));
        assert!(offered.claim(true).is_none(), "not asked again");
        let io = error(redis::ErrorKind::Io, "reset");
        assert!(!offered.failed(&io, true));
        assert!(offered.claim(true).is_some(), "a reconnect asks again");
        // Any call's failure counts (an acquire's too): a failover asks again, a refused
        // permission does not.
        offered.set(NativeCommands::default());
        let perm = error(
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "no permission",
        );
        offered.met(&perm);
        assert!(offered.claim(true).is_none());
        offered.met(&error(
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "a replica now",
        ));
        assert!(offered.claim(true).is_some(), "a failover asks again");
    }

    #[test]
    fn one_question_at_a_time_its_outcome_kept_whatever_it_is() {
        let offered = Offered::default();
        assert!(offered.claim(false).is_none(), "the handle forces scripts");
        let question = offered.claim(true).expect("open at first");
        assert!(offered.claim(true).is_none(), "one question out at a time");
        assert_eq!(offered.get(), None, "nothing known while it is out");
        assert_eq!(offered.usable(true), NativeCommands::default(), "scripts");
        // No reply within its bound: nothing offered, and remembered, so the calls that
        // follow do not ask (and wait) again.
        let silent = Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no reply",
        )));
        offered.answered(question, NativeCommands::read(&silent));
        assert_eq!(offered.get(), Some(NativeCommands::default()));
        assert!(offered.claim(true).is_none(), "not asked again");
        // Until a call meets a reconnect or a failover.
        offered.met(&LockError::no_reply(std::time::Duration::from_millis(500)));
        let question = offered.claim(true).expect("open again");
        offered.answered(question, BOTH);
        assert_eq!(offered.get(), Some(BOTH));
    }

    #[test]
    fn an_answer_for_the_server_that_was_is_left_out() {
        let offered = Offered::default();
        let question = offered.claim(true).expect("open");
        // A call meets a failover while the question is out.
        offered.met(&error(redis::ErrorKind::Io, "reset"));
        assert!(offered.claim(true).is_none(), "still one out");
        offered.answered(question, BOTH);
        assert_eq!(
            offered.get(),
            None,
            "the answer came from the server that was"
        );
        let again = offered.claim(true).expect("open again");
        // A refusal settles it at once; the question out then answers nothing.
        offered.set(NativeCommands::default());
        offered.answered(again, BOTH);
        assert_eq!(offered.get(), Some(NativeCommands::default()));
        // An answer to an earlier claim never settles a later one.
        offered.met(&error(redis::ErrorKind::Io, "reset"));
        let later = offered.claim(true).expect("open");
        offered.answered(question, BOTH);
        assert_eq!(offered.get(), None);
        offered.answered(later, NativeCommands::default());
        assert_eq!(offered.get(), Some(NativeCommands::default()));
        // A question never sent leaves it open for the next call.
        offered.met(&error(redis::ErrorKind::Io, "reset"));
        let unsent = offered.claim(true).expect("open");
        offered.withdrawn(unsent);
        assert_eq!(offered.get(), None);
        assert!(offered.claim(true).is_some(), "open again");
    }

    #[test]
    fn a_cluster_primary_without_an_answer_offers_nothing() {
        let valkey = Value::Map(vec![(bulk("delifeq"), Value::Array(vec![bulk("summary")]))]);
        let by_node = |answers: Vec<Value>| {
            let nodes = answers.into_iter().enumerate();
            Ok(Value::Map(
                nodes.map(|(i, a)| (bulk(&format!("n{i}")), a)).collect(),
            ))
        };
        let two = NativeCommands::read_every(&by_node(vec![valkey.clone(), valkey.clone()]));
        assert!(two.delifeq);
        let silent = Err(redis::RedisError::from((redis::ErrorKind::Io, "timed out")));
        assert_eq!(
            NativeCommands::read_every(&silent),
            NativeCommands::default()
        );
        let refused = redis::parse_redis_value(b"-NOPERM no permission\r\n").unwrap();
        assert!(matches!(refused, Value::ServerError(_)));
        let one_refused = NativeCommands::read_every(&by_node(vec![valkey, refused]));
        assert_eq!(one_refused, NativeCommands::default());
    }
}
