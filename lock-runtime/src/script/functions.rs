//! Redis Functions delivery: every script of the binary as one function library
//! (`FUNCTION LOAD`), called with `FCALL` / `FCALL_RO`.
//!
//! Why: a library is persisted and replicated with the data, so a promoted replica or a
//! restarted server with its RDB/AOF already has it; a script cache (`SCRIPT LOAD`) is
//! neither, and starts cold after every failover. The library is written by
//! [`lockscript_audit::functions::library`] from the registered scripts' bytes
//! ([`Script::bytes`], a file that is not UTF-8 as it is), the same generator as
//! `lockscript functions` uses on the files, so a reviewer gets the same bytes from the
//! files.
//!
//! A function runs as its script does by `EVAL`: the generator registers the function of
//! a script without a shebang with `allow-cross-slot-keys`, so on a Cluster it may touch
//! keys of other slots on its node, as the script may.

use std::sync::OnceLock;

use lockscript_audit::functions::{self as generator, Source};
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind};

use crate::{LockError, Script, scripts};

pub use lockscript_audit::functions::{Function, Library};

/// How an [`Invocation`](crate::Invocation) reaches the server.
///
/// ```no_run
/// use lockscript::Delivery;
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let locks = lockscript::Locks::connect(&client).await?.delivery(Delivery::Functions);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Delivery {
    /// `EVALSHA` (`EVALSHA_RO` for `no-writes` scripts); after `NOSCRIPT`, `SCRIPT LOAD`
    /// and `EVALSHA` again, `EVAL` as the last resort. Works on every server with Lua.
    #[default]
    Scripts,
    /// `FCALL` (`FCALL_RO` for `no-writes` scripts) of the script's function in
    /// [`functions_library`]; when the server answers that the function is missing,
    /// `FUNCTION LOAD` of the library and `FCALL` again. Needs Redis 7.0+ or Valkey 7.2+.
    /// The library is persisted and replicated: a promoted replica already has it. Each
    /// function runs as its script does by `EVAL` (a script without a shebang may touch
    /// keys of other slots on its node), except that out of memory a function without
    /// `allow-oom` is refused up front. Valkey cannot load a library with a NUL byte in
    /// it ([`LockError::Unsupported`]).
    ///
    /// [`LockError::Unsupported`]: crate::LockError::Unsupported
    Functions,
}

/// The function library of every script registered in the binary (see
/// [`scripts`](crate::scripts)), written once.
///
/// ```no_run
/// let lib = lockscript::functions_library();
/// println!("{} holds {} functions", lib.name, lib.functions.len());
/// print!("{}", lib.text()); // FUNCTION LOAD receives `lib.code`, these bytes
/// ```
pub fn functions_library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let sources: Vec<Source<'_>> = scripts()
            .map(|s| Source {
                name: s.name(),
                source: s.bytes(),
            })
            .collect();
        generator::library(&sources)
    })
}

/// The function of `script` in [`functions_library`]: every registered script has one.
pub(crate) fn function_of(script: &Script) -> Option<&'static Function> {
    functions_library().function(script.sha1())
}

/// `FUNCTION LOAD` of the library (not `REPLACE`: its name is its content's digest).
pub(crate) fn load_cmd() -> Cmd {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg(&functions_library().code);
    cmd
}

/// `FUNCTION LOAD`s [`functions_library`] (on a cluster connection, redis-rs sends it to
/// every primary) and returns its name. A server that already has it answers that the
/// library exists, which counts as loaded.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let name = lockscript::load_functions(&mut conn)?;
/// println!("library {name} is on the server");
/// # Ok(())
/// # }
/// ```
pub fn load_functions<C: redis::ConnectionLike + ?Sized>(
    con: &mut C,
) -> Result<&'static str, LockError> {
    let reply = con
        .req_command(&load_cmd())
        .and_then(redis::Value::extract_error);
    loaded(reply.map(drop))
}

/// [`load_functions`] on an async connection.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// lockscript::load_functions_async(&mut conn).await?;
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "tokio")]
pub async fn load_functions_async<C: redis::aio::ConnectionLike>(
    con: &mut C,
) -> Result<&'static str, LockError> {
    let reply = con
        .req_packed_command(&load_cmd())
        .await
        .and_then(redis::Value::extract_error);
    loaded(reply.map(drop))
}

/// The outcome of a `FUNCTION LOAD`: loaded, or already there; else why not.
pub(crate) fn loaded(reply: Result<(), RedisError>) -> Result<&'static str, LockError> {
    match reply {
        Ok(()) => Ok(&functions_library().name),
        Err(err) if already_loaded(&err) => Ok(&functions_library().name),
        Err(err) => Err(load_refused(err)),
    }
}

/// `Library '...' already exists`: someone loaded the same library (same digest) first.
pub(crate) fn already_loaded(err: &RedisError) -> bool {
    err.detail().is_some_and(|d| d.contains("already exists"))
}

/// `FCALL` of a function the server does not have.
pub(crate) fn is_function_missing(err: &RedisError) -> bool {
    err.detail()
        .is_some_and(|d| d.starts_with("Function not found"))
}

/// Why a `FUNCTION LOAD` failed, as a typed error: a refusal for now (`READONLY` on a
/// replica, `LOADING`, a Cluster redirect) is the same retryable [`LockError::Redis`] as
/// for any other command; what else the server says of the library is
/// [`LockError::Script`] under the name `FUNCTION LOAD`.
pub(crate) fn load_refused(err: RedisError) -> LockError {
    if crate::error::is_retry_later(&err) {
        return LockError::Redis(err);
    }
    if err.kind() != ErrorKind::Server(ServerErrorKind::NoPerm)
        && let Some(unsupported) = unsupported(&err)
    {
        return unsupported;
    }
    let message = crate::script::script::server_message(&err);
    if message.contains("Error compiling function") && functions_library().code.contains(&0) {
        return LockError::Unsupported {
            what: "load a Functions library that holds a NUL byte",
            message,
            advice: "Valkey compiles a library only up to its first NUL byte, and a script of \
                     this binary holds one; remove it from the script (write `\\0` in a Lua \
                     string instead), or use Delivery::Scripts on this server",
        };
    }
    if err.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) {
        return LockError::Permission {
            script: "FUNCTION LOAD",
            command: Some("FUNCTION|LOAD".to_owned()),
            message,
        };
    }
    match err.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension => LockError::Script {
            script: "FUNCTION LOAD",
            at: None,
            message,
            source: err,
        },
        _ => LockError::Redis(err),
    }
}

/// A server without Lua, or without Redis Functions, as [`LockError::Unsupported`].
pub(crate) fn unsupported(err: &RedisError) -> Option<LockError> {
    let detail = err.detail().unwrap_or_default();
    let message = crate::script::script::server_message(err);
    if no_lua(detail) {
        return Some(LockError::Unsupported {
            what: "run Lua scripts",
            message,
            advice: "on Valkey 9 load its Lua engine (`loadmodule` of the `lua` module, or do not \
                     unload it); on a managed service enable scripting; every lock needs it",
        });
    }
    if detail.starts_with("unknown command 'FUNCTION'")
        || detail.starts_with("unknown command 'FCALL")
        || detail.starts_with("unknown command `FUNCTION`")
        || detail.starts_with("unknown command `FCALL")
    {
        return Some(LockError::Unsupported {
            what: "run Redis Functions",
            message,
            advice: "Functions need Redis 7.0+ or Valkey 7.2+; use Delivery::Scripts (the default) \
                     on this server",
        });
    }
    None
}

/// What the server cannot do for `script`, when that is why it refused it: no Lua, no
/// Functions ([`unsupported`]), or a shebang it cannot parse ([`shebang_refused`]).
pub(crate) fn refusal(script: &Script, err: &RedisError) -> Option<LockError> {
    unsupported(err).or_else(|| shebang_refused(script, err))
}

/// A script with a `#!lua` shebang on a server before Redis 7.0, which reads the shebang
/// as Lua and fails to compile it, and has no `EVALSHA_RO` / `EVAL_RO` for the
/// `no-writes` ones.
pub(crate) fn shebang_refused(script: &Script, err: &RedisError) -> Option<LockError> {
    let detail = err.detail().unwrap_or_default();
    let no_ro = ["`EVALSHA_RO`", "`EVAL_RO`", "'EVALSHA_RO'", "'EVAL_RO'"]
        .iter()
        .any(|name| detail.starts_with(&format!("unknown command {name}")));
    (script.source().starts_with("#!")
        && (no_ro || detail.contains("Error compiling script") && detail.contains("near '#'")))
    .then(|| LockError::Unsupported {
        what: "run a script with a `#!lua` shebang",
        message: format!("script `{}`: {detail}", script.name()),
        advice: "the shebang needs Redis 7.0+ or Valkey 7.2+; on an older server remove the \
                 `#!lua` line (the script loses its flags)",
    })
}

/// What `connect` sends to learn whether the server runs Lua at all: `SCRIPT LOAD` of
/// compare-del.lua, which also keeps the release script cached for good.
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub(crate) fn lua_probe() -> Cmd {
    crate::script::builtin::compare_del("", "")
        .script()
        .load_cmd()
}

/// Reads the reply to [`lua_probe`]: only a server's "no Lua engine" is an error. Any
/// other failure (no permission to load, a timeout) is left to the first call, which
/// reports it with its own typed error.
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub(crate) fn lua_probed(reply: Result<redis::Value, RedisError>) -> Result<(), LockError> {
    match reply.and_then(redis::Value::extract_error) {
        Err(err) if err.detail().is_some_and(no_lua) => {
            Err(unsupported(&err).unwrap_or(LockError::Redis(err)))
        }
        // A server that wants a password the URL does not give: said at connect, not at
        // the first lock as if a script had failed.
        Err(err) if err.code() == Some("NOAUTH") => Err(LockError::Redis(err)),
        _ => Ok(()),
    }
}

/// The replies of a server without a Lua engine: Valkey 9 without its `lua` module
/// answers EVAL and SCRIPT LOAD "Could not find scripting engine 'lua'", FUNCTION LOAD
/// "Engine 'lua' not found".
pub(crate) fn no_lua(detail: &str) -> bool {
    detail.contains("Could not find scripting engine") || detail.contains("Engine 'lua' not found")
}

#[cfg(test)]
mod tests {
    use super::no_lua;

    #[test]
    fn the_replies_of_a_server_without_lua_are_recognised() {
        // Valkey 9.1 after `MODULE UNLOAD lua`, as it replies to EVAL and FUNCTION LOAD.
        assert!(no_lua("Could not find scripting engine 'lua'"));
        assert!(no_lua("Engine 'lua' not found"));
        assert!(!no_lua("Function not found"));
    }
}
