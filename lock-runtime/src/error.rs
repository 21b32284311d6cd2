//! The one error type of the crate.

use std::time::Duration;

use redis::{ErrorKind, RedisError};

/// Everything that can go wrong in `lockscript`.
///
/// Each variant says what happened to the caller and what to do about it.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// use lockscript::LockError;
///
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// match lockscript::builtin::renew("lock:{orders}", "my-token", 30_000).invoke(&mut conn) {
///     Ok(1) => println!("renewed"),
///     Ok(_) => println!("not ours any more"),
///     Err(LockError::Script { script, message, .. }) => eprintln!("{script} raised: {message}"),
///     Err(other) => return Err(other),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The server ran the script and it raised an error (`redis.error_reply`, a failing
    /// `redis.call`, a wrong-type key...). The server's message is kept as the source.
    #[error(
        "script `{script}` failed on the server{}: {message}",
        at.as_ref().map(|at| format!(" at {at}")).unwrap_or_default()
    )]
    Script {
        /// The script's name (its file stem).
        script: &'static str,
        /// The file and line the server's error names, as `path:line`: the included
        /// file's own line for an error in an included part. `None` when the server names
        /// no line (`redis.error_reply`) or the script was sent wrapped.
        at: Option<String>,
        /// The server's message as it sent it, e.g. `ERR value is not an integer...`.
        message: String,
        /// The server's error.
        #[source]
        source: RedisError,
    },

    /// The connection's ACL user may not do something the script needs: a command it
    /// calls (scripts run with the caller's permissions), its keys, or a channel.
    /// Nothing was changed by the refused command.
    #[error(
        "the Redis user may not {} in script `{script}` (server: {message}); grant it \
         (see the least ACL of a lock user in lockscript::guide::servers)",
        match command {
            Some(c) => format!("run `{c}` (ACL SETUSER <user> +{})", c.to_ascii_lowercase()),
            None => "do what it asked".to_owned(),
        }
    )]
    Permission {
        /// The script's name.
        script: &'static str,
        /// The command refused, when it can be told from the script's source.
        command: Option<String>,
        /// The server's message.
        message: String,
    },

    /// On Redis Cluster, the script's keys hash to different slots, so no single node
    /// can run it. Nothing ran.
    #[error(
        "the keys of script `{script}` hash to different Cluster slots; give them one hash \
         tag so they share a slot, e.g. `{{order:42}}:lock` and `{{order:42}}:fence` \
         (only the part inside the braces is hashed); the keys of a guarded script must \
         carry its lock's name as their tag: `{{<lock name>}}:...`"
    )]
    CrossSlot {
        /// The script's name.
        script: &'static str,
        /// The server's error.
        #[source]
        source: RedisError,
    },

    /// The script ran, but its reply does not convert to the declared return type.
    #[error(
        "script `{script}` replied with a value that is not a `{expected}`: {source}; \
         fix the declared return type or the script's return"
    )]
    UnexpectedReply {
        /// The script's name.
        script: &'static str,
        /// The declared Rust return type.
        expected: &'static str,
        /// The conversion error.
        #[source]
        source: RedisError,
    },

    /// A parameter of a script function serialized to a number of Redis arguments the
    /// script does not expect (for example a tuple passed where one value belongs).
    /// Nothing was sent.
    #[error(
        "parameter `{parameter}` of script `{script}` became {count} Redis arguments, \
         but it stands for exactly one KEYS/ARGV slot; pass a single value, or declare \
         the parameter as a slice to make it variadic"
    )]
    Argument {
        /// The script's name.
        script: &'static str,
        /// The Rust parameter's name.
        parameter: &'static str,
        /// How many arguments it became.
        count: usize,
    },

    /// `SCRIPT LOAD` answered with a digest other than the one computed at compile time:
    /// the server would not be running the file that was reviewed.
    #[error(
        "server returned digest {server} for script `{script}`, but the reviewed file \
         hashes to {compiled}; do not run it until the difference is understood"
    )]
    DigestMismatch {
        /// The script's name.
        script: &'static str,
        /// The compile-time SHA1.
        compiled: &'static str,
        /// What the server answered.
        server: String,
    },

    /// `lock()` did not get the lock within `wait_timeout`. Nothing is held.
    #[error(
        "lock `{name}` is still held by another owner after waiting {waited:?} \
         ({attempts} attempts); raise wait_timeout, or use try_lock() to skip when busy"
    )]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the call waited.
        waited: Duration,
        /// How many acquisition attempts it made.
        attempts: u32,
    },

    /// The guard no longer owns the lock: its lease expired, or the key was deleted or
    /// taken by another owner. Nothing was changed on the server. Stop the work the lock
    /// protected; a resource that checks fencing tokens refuses this holder's writes.
    #[error(
        "lock `{name}` is no longer held by this guard (its lease expired or another owner \
         took it); stop the protected work"
    )]
    NotHeld {
        /// The lock's name.
        name: String,
    },

    /// A guarded script (`#[lock_script("...", guarded)]`) did not run: the lock is no
    /// longer this guard's, and its fencing counter has moved on to `newer`, above this
    /// guard's `fence` (a later holder may have been granted it; the counter also moves
    /// on attempts refused while this guard held it). This guard's lease is over; stop
    /// the protected work.
    #[error(
        "lock `{name}` is no longer this guard's and its fencing counter has moved on (to {newer}, this guard's token is {fence}): a later holder may hold it; the guarded script did not run: stop the protected work"
    )]
    Stale {
        /// The lock's name.
        name: String,
        /// This guard's fencing token.
        fence: u64,
        /// The lock's fencing counter when the script was refused.
        newer: u64,
    },

    /// The lease was lost while `with_lock` was running the protected work, which was
    /// stopped (dropped) at that point.
    #[error("lock `{name}` was lost while the protected work ran; the work was cancelled")]
    Lost {
        /// The lock's name.
        name: String,
    },

    /// `wait_for_replicas` is on and fewer replicas than asked acknowledged the grant
    /// within its timeout (`WAIT`), so a failover could lose it. The grant is released
    /// again in the background, a round trip later (its TTL frees it if that fails too);
    /// the caller holds nothing. Its fencing token was used up.
    #[error(
        "lock `{name}` was granted, but only {acked} of the {wanted} replicas asked for \
         acknowledged it in time, so it was released again; check the replicas' health and \
         replication lag, raise the wait_for_replicas timeout, or ask for fewer replicas"
    )]
    NotReplicated {
        /// The lock's name.
        name: String,
        /// How many replicas acknowledged the grant (0 when the grant was no longer on
        /// the master that answered, e.g. after a reconnect).
        acked: usize,
        /// How many were asked for.
        wanted: usize,
    },

    /// The write side of a read/write lock was asked for by the task (or thread) that
    /// holds its read side through the same handle: it would wait for itself forever.
    /// Nothing was sent. Release the read guard first, or take the write lock first and
    /// [downgrade](crate::WriteGuard::downgrade) it.
    #[error(
        "read/write lock `{name}`: this task holds it for reading, so a write lock would wait \
         for itself; release the read guard first, or take the write lock first and downgrade it"
    )]
    Upgrade {
        /// The lock's name.
        name: String,
    },

    /// The name is held as another kind of lock than asked for: a lock (or a fair lock,
    /// or a write lock) where readers or semaphore permits hold it, a reader where
    /// permits hold it, a permit where readers hold it. The server refused it: nothing
    /// was granted or changed. One name serves one kind; give this one another name.
    #[error(
        "lock `{name}` is held as {held}, so it cannot be taken as {wanted}: one name serves \
         one kind of lock; give this one another name"
    )]
    WrongKind {
        /// The lock's name.
        name: String,
        /// What holds the name, e.g. "a read/write lock's readers".
        held: &'static str,
        /// What was asked for, e.g. "a lock".
        wanted: &'static str,
    },

    /// A lease outside the accepted range. Nothing was sent.
    #[error(
        "ttl {ttl:?} is outside {min:?}..={max:?}; use a lease in that range (with the watchdog on, 30 s is plenty)"
    )]
    InvalidTtl {
        /// What was asked for.
        ttl: Duration,
        /// The shortest accepted lease.
        min: Duration,
        /// The longest accepted lease.
        max: Duration,
    },

    /// A lock name that cannot be used. Nothing was sent.
    #[error("invalid lock name `{name}`: {reason}")]
    InvalidName {
        /// The name (at most its first 64 characters).
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },

    /// The server cannot do what the call needs, and nothing ran: it has no Lua engine
    /// (a Valkey 9 started without its `lua` module, or scripting disabled by the
    /// provider), so it cannot run any script; or it has no Redis Functions (Redis before
    /// 7.0) and [`Delivery::Functions`](crate::Delivery::Functions) was chosen; or it
    /// cannot load the Functions library (Valkey cuts one at a NUL byte).
    #[error("the server cannot {what} (it answered: {message}); {advice}")]
    Unsupported {
        /// What it cannot do.
        what: &'static str,
        /// The server's message.
        message: String,
        /// What to do about it.
        advice: &'static str,
    },

    /// The server is older than a script needs: it lacks a command the script calls,
    /// or its shebang. Nothing was loaded or run.
    #[error(
        "script `{script}` needs {needs}, but the server is {server}: run it on a newer \
         server, or change the script"
    )]
    ServerTooOld {
        /// The script's name.
        script: &'static str,
        /// What it needs, naming the command: "Redis 7.4.0 or later (for `HEXPIRE`)".
        needs: String,
        /// The server, as its `INFO` names it: "Redis 7.0.15".
        server: String,
    },

    /// A builder setting that cannot work, reported at the first call that uses it.
    /// Nothing was sent.
    #[error("invalid lock settings: {0}")]
    InvalidSettings(String),

    /// The operating system's random source failed, so no owner token could be drawn.
    #[error("cannot draw a random owner token from the OS: {0}")]
    Entropy(String),

    /// A handle's `connect` could not open its connection: nothing was sent. The message
    /// names the address tried (never the password) and a hint that fits the cause: no
    /// server listening, a database index the server lacks, wrong credentials, TLS, a
    /// server that did not answer in time.
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/99").unwrap();
    /// if let Err(lockscript::LockError::Connect { address, .. }) =
    ///     lockscript::Locks::connect(&client).await
    /// {
    ///     eprintln!("cannot reach {address}");
    /// }
    /// # }
    /// ```
    #[error(
        "cannot connect to Redis at {address}{}: {source}; {}",
        if *database == 0 { String::new() } else { format!(" (database {database})") },
        hint(.source)
    )]
    Connect {
        /// The address tried, as `host:port` (or the socket's path), without credentials.
        address: String,
        /// The database index the URL selects (the number at its end; 0 when none).
        database: i64,
        /// What the client or the server answered.
        #[source]
        source: RedisError,
    },

    /// Talking to Redis failed (connection refused, I/O error, timeout...). A script
    /// whose call failed this way may or may not have run: it is never re-sent blindly.
    /// The message ends with a hint that fits the cause.
    #[error("talking to Redis failed: {0}; {hint}", hint = hint(.0))]
    Redis(#[from] RedisError),
}

#[cfg(any(feature = "tokio", feature = "blocking"))]
impl LockError {
    /// A handle's connect to `client`'s address failed with `source`.
    pub(crate) fn connect(client: &redis::Client, source: RedisError) -> Self {
        let info = client.get_connection_info();
        LockError::Connect {
            address: info.addr().to_string(),
            database: info.redis_settings().db(),
            source,
        }
    }
}

/// What to check, for the cause of `e`: one hint for each cause a user can fix, the
/// generic one only when the cause is not known.
fn hint(e: &RedisError) -> String {
    let text = e.to_string();
    if text.contains("DB index is out of range") {
        return "the server has no such database index (the number at the end of the URL); \
                use one below its `databases` setting (16 by default)"
            .to_owned();
    }
    if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        || text.contains("WRONGPASS")
        || text.contains("NOAUTH")
    {
        return "check the user and password in the URL (redis://user:password@host:port/) \
                and that the server's ACL lets that user log in"
            .to_owned();
    }
    if e.is_connection_refusal() {
        return "no server is listening there: start it, or fix the host and port in the URL"
            .to_owned();
    }
    if e.kind() == ErrorKind::InvalidClientConfig
        || text.contains("TLS")
        || text.contains("certificate")
    {
        return "check the URL and its TLS setup (rediss:// for a server that speaks TLS, \
                redis:// for one that does not, and the certificates)"
            .to_owned();
    }
    if e.is_timeout() {
        return "the server did not answer in time: check that it is up and not paused or \
                overloaded, and that nothing between drops the packets"
            .to_owned();
    }
    "check that the server is up and reachable at the configured address".to_owned()
}

#[cfg(any(feature = "tokio", feature = "blocking"))]
impl LockError {
    /// Whether the command that failed may have run on the server all the same: its
    /// reply was lost to an I/O error or a timeout. A server's error reply proves it did
    /// not (the lock scripts change nothing when they fail), and so does any error
    /// raised before sending.
    pub(crate) fn may_have_run(&self) -> bool {
        matches!(self, LockError::Redis(e) if !matches!(e.kind(), ErrorKind::Server(_))
            && !was_not_sent(e))
    }

    /// Worth another attempt before a deadline: the server was unreachable, slow, or in
    /// the middle of a failover. Everything else (a refused permission, a script error, a
    /// bad setting) would fail the same way again.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            LockError::Redis(e) => !matches!(e.kind(), ErrorKind::Server(_)) || is_retry_later(e),
            _ => false,
        }
    }

    /// A failed round trip's error, for each call in it (whether it may have run is
    /// kept).
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub(crate) fn for_each(&self) -> LockError {
        match self {
            LockError::Redis(r) => LockError::Redis(r.clone()),
            other => LockError::InvalidSettings(other.to_string()),
        }
    }

    /// Whether a Cluster connection refused a pipeline whose commands live in different
    /// slots (nothing was sent).
    #[cfg(feature = "tokio")]
    pub(crate) fn is_cross_slot(&self) -> bool {
        match self {
            LockError::CrossSlot { .. } => true,
            LockError::Redis(e) => e.kind() == ErrorKind::Server(redis::ServerErrorKind::CrossSlot),
            _ => false,
        }
    }

    /// The server refused to run the command for now, which proves it did not run: a
    /// Cluster redirect or a failover in progress (`MOVED`, `ASK`, `TRYAGAIN`,
    /// `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`), or a server still loading its data.
    pub(crate) fn is_retry_later(&self) -> bool {
        matches!(self, LockError::Redis(e) if is_retry_later(e))
    }

    /// The error of a command that got no reply within the response timeout. The
    /// command may have run.
    /// The call's response timeout passed while other calls of the handle had its
    /// connection: nothing was sent (see [`may_have_run`](Self::may_have_run)). A
    /// timeout, as the caller sees it.
    #[cfg(feature = "blocking")]
    pub(crate) fn not_sent(timeout: Duration) -> Self {
        LockError::Redis(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            NotSent(timeout),
        )))
    }

    pub(crate) fn no_reply(timeout: Duration) -> Self {
        LockError::Redis(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply within the response timeout ({timeout:?})"),
        )))
    }
}

/// [`LockError::not_sent`]'s cause: the response timeout passed before the call got its
/// turn on the handle's connection.
#[cfg(feature = "blocking")]
#[derive(Debug)]
struct NotSent(Duration);

#[cfg(feature = "blocking")]
impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the handle's connection stayed busy with its other calls for the whole response \
             timeout ({:?}); nothing was sent",
            self.0
        )
    }
}

#[cfg(feature = "blocking")]
impl std::error::Error for NotSent {}

/// Whether `e` is [`LockError::not_sent`]'s error: a call that never got the connection.
#[cfg(feature = "blocking")]
fn was_not_sent(e: &RedisError) -> bool {
    std::error::Error::source(e)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .and_then(|io| io.get_ref()?.downcast_ref::<NotSent>())
        .is_some()
}

/// Only the blocking face's calls wait for a turn on a connection.
#[cfg(all(feature = "tokio", not(feature = "blocking")))]
fn was_not_sent(_: &RedisError) -> bool {
    false
}

/// See [`LockError::is_retry_later`].
pub(crate) fn is_retry_later(e: &RedisError) -> bool {
    use redis::ServerErrorKind::{
        Ask, BusyLoading, ClusterDown, MasterDown, Moved, ReadOnly, TryAgain,
    };
    matches!(
        e.kind(),
        ErrorKind::Server(
            Moved | Ask | TryAgain | ClusterDown | MasterDown | BusyLoading | ReadOnly
        )
    )
}

#[cfg(all(test, any(feature = "tokio", feature = "blocking")))]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_may_have_run_and_is_worth_retrying() {
        let e = LockError::no_reply(Duration::from_millis(500));
        assert!(e.may_have_run());
        assert!(e.is_transient());
        assert!(matches!(&e, LockError::Redis(r) if r.is_timeout()));
        assert!(e.to_string().contains("did not answer in time"), "{e}");
        let e = LockError::NotHeld { name: "x".into() };
        assert!(!e.may_have_run() && !e.is_transient());
    }
}
