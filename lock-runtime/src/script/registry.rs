//! The link-time registry of every script in the binary, and preloading them.
//!
//! Each `#[lock_script]` adds its [`Script`] to a `linkme` distributed slice, so the
//! list is complete without any start-up code: scripts declared in any crate of the
//! binary, the lock runtime's own included.

use crate::script::script::ServerInfo;
use crate::{LockError, Script};

/// Every `#[lock_script]` in the binary registers itself here.
#[doc(hidden)]
#[linkme::distributed_slice]
#[allow(unsafe_code)]
pub static SCRIPTS: [&'static Script];

/// Iterates every script declared with `#[lock_script]` anywhere in the binary,
/// sorted by name (then path) so listings are stable.
///
/// ```no_run
/// for script in lockscript::scripts() {
///     println!("{}  {}", script.sha1(), script.path());
/// }
/// ```
pub fn scripts() -> impl ExactSizeIterator<Item = &'static Script> {
    let mut all: Vec<&'static Script> = SCRIPTS.iter().copied().collect();
    all.sort_by(|a, b| (a.name(), a.path()).cmp(&(b.name(), b.path())));
    all.into_iter()
}

/// `SCRIPT LOAD`s every registered script and returns how many were loaded.
///
/// First it asks the server's version (`INFO server`) and fails with
/// [`LockError::ServerTooOld`], before loading anything, when a script needs a newer
/// server ([`Script::floor`]). On a Cluster connection every primary answers, and the
/// oldest counts. A server that does not answer (an ACL without `+info`, a node's
/// error, no version in the reply) is not checked: the scripts are loaded, and a script
/// the server is too old for fails at its call with the server's own error.
///
/// Fails with [`LockError::DigestMismatch`] when the server answers a digest other than
/// the compiled one, and with [`LockError::Unsupported`] on a server that cannot run
/// Lua, or that cannot parse a `#!lua` shebang (before Redis 7.0). Since Redis 7.4 (and
/// in Valkey 8+) the server evicts scripts cached by `EVAL` once more than 500 are cached,
/// but keeps scripts loaded this way; call it at start-up, before any `EVAL` caches them
/// (Redis 8.2 still evicts a script first cached by `EVAL` and loaded later; Valkey 9.1
/// does not). The cache is lost on restart,
/// failover and `SCRIPT FLUSH` in any case; invocations load them again then (`SCRIPT
/// LOAD` after `NOSCRIPT`).
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let n = lockscript::load_scripts(&mut conn)?;
/// println!("{n} scripts loaded");
/// # Ok(())
/// # }
/// ```
pub fn load_scripts<C: redis::ConnectionLike + ?Sized>(con: &mut C) -> Result<usize, LockError> {
    let servers = ServerInfo::read(con.req_command(&ServerInfo::cmd()));
    for script in scripts() {
        servers.check(script)?;
    }
    let mut loaded = 0;
    for script in scripts() {
        let reply = con
            .req_command(&script.load_cmd())
            .and_then(redis::Value::extract_error)
            .map_err(|e| refused(script, e))?;
        script.check_loaded_reply(reply)?;
        loaded += 1;
    }
    Ok(loaded)
}

/// [`load_scripts`] on an async connection.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// lockscript::load_scripts_async(&mut conn).await?;
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "tokio")]
pub async fn load_scripts_async<C: redis::aio::ConnectionLike>(
    con: &mut C,
) -> Result<usize, LockError> {
    let servers = ServerInfo::read(con.req_packed_command(&ServerInfo::cmd()).await);
    for script in scripts() {
        servers.check(script)?;
    }
    let mut loaded = 0;
    for script in scripts() {
        let reply = con
            .req_packed_command(&script.load_cmd())
            .await
            .and_then(redis::Value::extract_error)
            .map_err(|e| refused(script, e))?;
        script.check_loaded_reply(reply)?;
        loaded += 1;
    }
    Ok(loaded)
}

/// A refused `SCRIPT LOAD`: a server without Lua, a shebang before Redis 7.0, or as is.
fn refused(script: &Script, err: redis::RedisError) -> LockError {
    crate::script::functions::refusal(script, &err).unwrap_or(LockError::Redis(err))
}
