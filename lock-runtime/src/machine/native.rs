//! The server's own conditional commands, where it has them: `SET key token IFEQ token
//! PX ttl` renews a plain lock's lease and `DELIFEQ key token` (or `DELEX key IFEQ
//! token`) releases it, each about a quarter of a script's server time (the guide's
//! performance page has the figures).
//!
//! What a server offers is asked of it ([`NativeCommands::ask`]: `COMMAND DOCS`),
//! never guessed from a version string, once per connection (of every primary of a
//! Redis Cluster, which then uses what all of them offer), and asked again after any
//! call on it (an acquire as much as a renewal) failed the way a reconnect or a
//! failover does: the server behind the address may be another one now. A server that
//! refuses a native command (it lacks it after all, or an ACL denies it), told by that
//! command's own reply whatever the others in its round trip answered, proves the
//! command did not run: the call is sent again as the script at once, and the
//! connection stays on scripts until it is asked again.
//!
//! The meaning is the scripts' exactly: a renewal or release of a key that is not ours
//! changes nothing and answers "not held"; an error reply means not done. A release's
//! outcome is its delete's reply: the notification sent beside it never undoes or
//! repeats it, and one refused (a user without the channel or `PUBLISH`) is logged once
//! per handle while waiters poll. Only a plain lock's renewal and release are native;
//! acquiring, handover, the fair queue, fencing counters and guarded scripts stay
//! scripts.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

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

    /// Where [`ask`](Self::ask) goes on a Redis Cluster: to every primary, each answering
    /// for itself (see [`Offered::answered_by_each`]).
    #[cfg(feature = "cluster")]
    pub(crate) fn every_primary() -> redis::cluster_routing::RoutingInfo {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None))
    }

    /// What the server's answer to [`ask`](Self::ask) says it offers. A refused answer
    /// (a server before 7.0 has no `COMMAND DOCS`; an ACL may deny `COMMAND`) offers
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

    /// Whether `error`, the reply to a native command, proves the server will not run
    /// it: an unknown command, a syntax it does not take, or an ACL refusal. The
    /// command did not run; the script is sent instead.
    pub(crate) fn refused(error: &LockError) -> bool {
        let LockError::Redis(e) = error else {
            return false;
        };
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

/// What one connection's server offers, once asked; shared by the clones of a handle.
#[derive(Debug, Default)]
pub(crate) struct Offered {
    bits: AtomicU8,
    /// A release notification was refused, and said so (once per handle).
    told: AtomicBool,
}

const ASKED: u8 = 1;
const SET_IFEQ: u8 = 2;
const DELIFEQ: u8 = 4;
const DELEX_IFEQ: u8 = 8;

impl Offered {
    /// What the server was found to offer; `None` until asked (or after [`forget`]).
    ///
    /// [`forget`]: Self::forget
    pub(crate) fn get(&self) -> Option<NativeCommands> {
        let bits = self.bits.load(Ordering::Relaxed);
        (bits & ASKED != 0).then_some(NativeCommands {
            set_ifeq: bits & SET_IFEQ != 0,
            delifeq: bits & DELIFEQ != 0,
            delex_ifeq: bits & DELEX_IFEQ != 0,
        })
    }

    /// Whether a lease call on this connection should ask first: native commands are
    /// allowed (`native`) and nobody asked since the connection was (re)made.
    pub(crate) fn to_ask(&self, native: bool) -> bool {
        native && self.bits.load(Ordering::Relaxed) & ASKED == 0
    }

    /// The commands a lease call may use: none when the handle forces scripts or the
    /// server was not asked.
    pub(crate) fn usable(&self, native: bool) -> NativeCommands {
        self.get().filter(|_| native).unwrap_or_default()
    }

    /// Remembers what the server's answer to [`NativeCommands::ask`] says; an answer that
    /// never came (an I/O error, a timeout) is no answer, and the next call asks again.
    /// An error reply is an answer: nothing offered.
    pub(crate) fn answered(&self, answer: &redis::RedisResult<Value>) {
        if let Err(e) = answer
            && (e.is_io_error() || e.is_timeout())
        {
            return;
        }
        self.set(NativeCommands::read(answer));
    }

    /// [`answered`](Self::answered), for the answers of every primary of a Redis Cluster
    /// to one question routed to all of them (a map of node address to answer).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn answered_by_each(&self, answers: &redis::RedisResult<Value>) {
        match answers {
            Ok(Value::Map(by_node)) => {
                let answers = by_node.iter().map(|(_, answer)| answer.clone());
                self.set(NativeCommands::read_each(answers));
            }
            _ => self.answered(answers),
        }
    }

    /// Remembers the server's answer.
    pub(crate) fn set(&self, found: NativeCommands) {
        let bit = |on: bool, bit: u8| if on { bit } else { 0 };
        let bits = ASKED
            | bit(found.set_ifeq, SET_IFEQ)
            | bit(found.delifeq, DELIFEQ)
            | bit(found.delex_ifeq, DELEX_IFEQ);
        self.bits.store(bits, Ordering::Relaxed);
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
    /// `READONLY`, `MOVED`, `LOADING`...) makes the next call ask again, since the server
    /// behind the address may be another one now.
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

    /// The server may have changed (a reconnect, a failover): ask again.
    pub(crate) fn forget(&self) {
        self.bits.store(0, Ordering::Relaxed);
    }
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

    #[test]
    fn a_refused_native_command_keeps_the_connection_on_scripts_until_asked_again() {
        let offered = Offered::default();
        assert!(offered.to_ask(true) && !offered.to_ask(false));
        offered.set(NativeCommands {
            set_ifeq: true,
            delifeq: true,
            delex_ifeq: false,
        });
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
        assert!(!offered.to_ask(true));
        // An answer that never came is no answer; an error reply is one.
        let fresh = Offered::default();
        fresh.answered(&Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "gone",
        ))));
        assert!(fresh.to_ask(true));
        let denied = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "no permission",
        ));
        fresh.answered(&Err(denied));
        assert_eq!(fresh.get(), Some(NativeCommands::default()));
        let io = LockError::Redis(redis::RedisError::from((redis::ErrorKind::Io, "reset")));
        assert!(!offered.failed(&io, true));
        assert!(offered.to_ask(true), "a reconnect asks again");
        // Any call's failure counts (an acquire's too): a failover asks again, a refused
        // permission does not.
        offered.set(NativeCommands::default());
        let perm = LockError::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "no permission",
        )));
        offered.met(&perm);
        assert!(!offered.to_ask(true));
        offered.met(&LockError::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "a replica now",
        ))));
        assert!(offered.to_ask(true), "a failover asks again");
    }
}
