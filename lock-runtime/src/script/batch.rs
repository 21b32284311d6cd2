//! Scripts inside pipelines and MULTI/EXEC transactions, where a `NOSCRIPT` reply
//! cannot be answered with a retry.
//!
//! The rule (node-redis's): the first occurrence of a script in a pipeline is sent as
//! `EVAL` with its bytes ([`Script::bytes`]), which also caches it on the server; later occurrences in
//! the same pipeline go as `EVALSHA`, and the server runs commands in order, so they
//! always find it. This holds inside MULTI too, where a `NOSCRIPT` would only surface
//! at EXEC while the other queued commands still ran. The price is sending each
//! script's source once per pipeline; nothing depends on the server's cache.
//!
//! A cluster pipeline sends every occurrence as `EVAL`: its commands fan out to
//! several nodes, and a script cached on one is unknown to the others.

use redis::{Arg, Cmd};

use crate::{Invocation, LockError, Script};

/// Adds typed script calls to a pipeline so that they never fail with `NOSCRIPT`.
///
/// ```no_run
/// use lockscript::PipelineExt;
/// use lockscript::builtin::{compare_del, renew};
///
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let mut pipe = redis::pipe();
/// pipe.atomic();
/// pipe.invoke(&renew("lock:{a}", "token-a", 30_000))?;
/// pipe.invoke(&compare_del("lock:{b}", "token-b"))?;
/// let (renewed, released): (i64, i64) = pipe.query(&mut conn)?;
/// # Ok(())
/// # }
/// ```
pub trait PipelineExt {
    /// Appends `call`: as `EVAL[_RO]` with the script's bytes if it is not yet in this
    /// pipeline, else as `EVALSHA[_RO]`. Fails with [`LockError::Argument`] (and adds
    /// nothing) when a parameter did not fit its slot.
    fn invoke<R>(&mut self, call: &Invocation<R>) -> Result<&mut Self, LockError>;
}

impl PipelineExt for redis::Pipeline {
    fn invoke<R>(&mut self, call: &Invocation<R>) -> Result<&mut Self, LockError> {
        call.check_arguments()?;
        let script = call.script();
        let cached = self.cmd_iter().any(|cmd| is_eval_of(cmd, script));
        let cmd = if cached {
            call.evalsha_cmd().clone()
        } else {
            call.eval_cmd()
        };
        Ok(self.add_command(cmd))
    }
}

#[cfg(feature = "cluster")]
impl PipelineExt for redis::cluster::ClusterPipeline {
    fn invoke<R>(&mut self, call: &Invocation<R>) -> Result<&mut Self, LockError> {
        call.check_arguments()?;
        Ok(self.add_command(call.eval_cmd()))
    }
}

/// Whether `cmd` is `EVAL[_RO] <script's bytes> ...`.
fn is_eval_of(cmd: &Cmd, script: &Script) -> bool {
    let mut args = cmd.args_iter();
    match (args.next(), args.next()) {
        (Some(Arg::Simple(name)), Some(Arg::Simple(body))) => {
            (name == b"EVAL" || name == b"EVAL_RO") && body == script.bytes()
        }
        _ => false,
    }
}
