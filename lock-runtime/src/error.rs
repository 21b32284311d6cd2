//! The one error type of the crate.

use redis::RedisError;

/// Everything that can go wrong in `lock_runtime`.
///
/// Each variant says what happened to the caller and what to do about it.
///
/// ```no_run
/// # fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::LockError;
///
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// match lock_runtime::builtin::renew("lock:{orders}", "my-token", 30_000).invoke(&mut conn) {
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
    #[error("script `{script}` failed on the server: {message}")]
    Script {
        /// The script's name (its file stem).
        script: &'static str,
        /// The server's message as it sent it, e.g. `ERR value is not an integer...`.
        message: String,
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

    /// Talking to Redis failed (connection refused, I/O error, timeout...). A script
    /// whose call failed this way may or may not have run: it is never re-sent blindly.
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
}
