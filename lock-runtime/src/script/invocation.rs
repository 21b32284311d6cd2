//! One call of a script: EVALSHA first; on `NOSCRIPT`, and only then, `SCRIPT LOAD` and
//! EVALSHA again (EVAL as the last resort); or FCALL with [`Delivery::Functions`].
//!
//! Why `SCRIPT LOAD` rather than EVAL: since Redis 7.4 a script cached by EVAL sits in an
//! LRU of 500 and is evicted when other clients EVAL many distinct scripts, while a loaded
//! one stays. EVAL remains for servers that refuse the load (a user without
//! `+script|load`, Valkey's `maxmemory-scripts`) and for a cache flushed in between.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, ServerErrorKind, ToRedisArgs, Value};

use crate::script::script::{Script, ServerInfo, server_message};
use crate::{Delivery, LockError};

/// A type a script function can take as a parameter: anything the redis crate can send
/// as arguments (`redis::ToRedisArgs`): strings, byte slices, integers, floats, and
/// slices or `Vec`s of them for a variadic parameter.
///
/// `#[lock_script]` checks each parameter's type against it, so a type that cannot be
/// sent is an error at that type.
///
/// ```no_run
/// fn sendable<T: lockscript::ScriptArg>() {}
/// sendable::<&str>();
/// sendable::<u64>();
/// sendable::<&[&str]>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be sent to a script as a key or argument",
    label = "a script parameter must be a type the redis crate can send",
    note = "use a string, bytes or a number (or a slice or Vec of them for a variadic \
            parameter), or implement `redis::ToRedisArgs` for `{Self}`"
)]
pub trait ScriptArg {
    /// Not public API: appends the value as the one slot of `parameter`.
    #[doc(hidden)]
    fn __push_one<R>(&self, invocation: &mut Invocation<R>, parameter: &'static str);
    /// Not public API: appends the value as any number of slots.
    #[doc(hidden)]
    fn __push_many<R>(&self, invocation: &mut Invocation<R>);
    /// Not public API: how many slots the value fills: the arguments
    /// [`__push_many`](Self::__push_many) writes for it, counted as they are written.
    #[doc(hidden)]
    fn __count(&self) -> usize;
}

impl<T: ToRedisArgs> ScriptArg for T {
    fn __push_one<R>(&self, invocation: &mut Invocation<R>, parameter: &'static str) {
        invocation.__one(parameter, self);
    }

    fn __push_many<R>(&self, invocation: &mut Invocation<R>) {
        invocation.__many(self);
    }

    fn __count(&self) -> usize {
        // What is written, not `num_of_args`: a slice answers its length, while its
        // `Option`s write nothing for `None` and its pairs write two each. The count
        // becomes the KEYS count the server splits the arguments by.
        let mut written = Written(0);
        self.write_redis_args(&mut written);
        written.0
    }
}

/// Counts the arguments a value writes, without keeping them.
struct Written(usize);

impl redis::RedisWrite for Written {
    fn write_arg(&mut self, _: &[u8]) {
        self.0 += 1;
    }

    fn write_arg_fmt(&mut self, _: impl fmt::Display) {
        self.0 += 1;
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        self.0 += 1;
        std::io::sink()
    }
}

/// A type a script function can return: anything the redis crate can read from a reply
/// (`redis::FromRedisValue`): integers, strings, `Option`s, `Vec`s, tuples, `()`.
///
/// `#[lock_script]` checks the declared return type against it, so a type that cannot be
/// read is an error at the declaration, not at the first `.invoke`.
///
/// ```no_run
/// fn readable<T: lockscript::ScriptReply>() {}
/// readable::<i64>();
/// readable::<Option<String>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be read from a script's reply",
    label = "a script's return type must be a type the redis crate can read",
    note = "return an integer, a string, bytes, an Option, a Vec or a tuple of them, or \
            implement `redis::FromRedisValue` for `{Self}`"
)]
pub trait ScriptReply {
    /// Not public API: names the type so the declaration is checked.
    #[doc(hidden)]
    const __CHECKED: () = ();
}

impl<T: FromRedisValue> ScriptReply for T {}

/// One call of a [`Script`] with its keys and arguments, ready to send.
///
/// Made by the function `#[lock_script]` generates; run it with [`invoke`](Self::invoke)
/// or [`invoke_async`](Self::invoke_async). Its `Debug` shows only the script and the
/// argument count: arguments may be secrets such as lock tokens.
///
/// ```no_run
/// # fn demo() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let renewed: i64 = lockscript::builtin::renew("lock:{a}", "token", 30_000).invoke(&mut conn)?;
/// # Ok(())
/// # }
/// ```
#[must_use = "an Invocation does nothing until it is invoked"]
pub struct Invocation<R> {
    script: &'static Script,
    /// `EVALSHA[_RO] sha1 numkeys keys... args...`, built once.
    cmd: Cmd,
    /// `FCALL[_RO] function numkeys keys... args...`, with [`Delivery::Functions`].
    fcall: Option<Cmd>,
    /// A parameter that did not serialize to the arguments its slot needs.
    bad_argument: Option<(&'static str, usize)>,
    /// A guarded call: the guard its script checks.
    guard: Option<Arc<dyn CallGuard>>,
    reply: PhantomData<fn() -> R>,
}

/// What a guarded call needs of the guard its script checks. The lock layer implements
/// it (the guarded faces); the script layer knows nothing of locks. (Without a lock face
/// compiled in, nothing builds a guarded call.)
#[cfg_attr(not(any(feature = "tokio", feature = "blocking")), allow(dead_code))]
pub(crate) trait CallGuard: Send + Sync {
    /// The keys the check reads, before the script's own: the lock key and its fencing
    /// counter.
    fn keys(&self) -> [&str; 2];
    /// The owner token sent before the script's own arguments.
    fn token(&self) -> &str;
    /// The fencing token sent after it.
    fn fence(&self) -> u64;
    /// Why one call of `script` cannot check this guard, if it cannot (nothing is sent).
    fn unusable(&self, script: &'static str) -> Option<LockError>;
    /// What the guard's refusal `code` (with `detail`) means to the caller, if it is one.
    fn refusal(&self, code: &str, detail: Option<&str>) -> Option<LockError>;
}

impl<R> Invocation<R> {
    /// Not public API: starts a call with `numkeys` keys.
    #[doc(hidden)]
    pub fn __new(script: &'static Script, numkeys: usize) -> Self {
        let mut cmd = Cmd::with_capacity(3 + numkeys, 64);
        cmd.arg(script.evalsha_name()).arg(script.sha1).arg(numkeys);
        Self {
            script,
            cmd,
            fcall: None,
            bad_argument: None,
            guard: None,
            reply: PhantomData,
        }
    }

    /// The same call, its reply read as `S` (a type that reads what this script
    /// answers, e.g. one element of a tuple it returns).
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub(crate) fn reply_as<S>(self) -> Invocation<S> {
        Invocation {
            script: self.script,
            cmd: self.cmd,
            fcall: self.fcall,
            bad_argument: self.bad_argument,
            guard: self.guard,
            reply: PhantomData,
        }
    }

    /// A call with `numkeys` keys of the script's own that `guard` checks first: its
    /// two keys go before them (see [`CallGuard`]).
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub(crate) fn guarded_by(
        script: &'static Script,
        guard: Arc<dyn CallGuard>,
        numkeys: usize,
    ) -> Self {
        let mut call = Self::__new(script, numkeys + 2);
        for key in guard.keys() {
            call.cmd.arg(key);
        }
        call.guard = Some(guard);
        call
    }

    /// Not public API: appends the guard's owner token and fencing token, after the keys
    /// and before the script's own arguments.
    #[doc(hidden)]
    pub fn __guard_args(&mut self) {
        if let Some(guard) = &self.guard {
            self.cmd.arg(guard.token()).arg(guard.fence());
        }
    }

    /// Not public API: appends one value that must fill exactly one slot.
    #[doc(hidden)]
    pub fn __one<T: ToRedisArgs>(&mut self, parameter: &'static str, value: &T) {
        let before = self.cmd.args_iter().len();
        self.cmd.arg(value);
        let count = self.cmd.args_iter().len() - before;
        if count != 1 && self.bad_argument.is_none() {
            self.bad_argument = Some((parameter, count));
        }
    }

    /// Not public API: appends a variadic slice.
    #[doc(hidden)]
    pub fn __many<T: ToRedisArgs>(&mut self, value: &T) {
        self.cmd.arg(value);
    }

    /// Chooses how the call reaches the server: [`Delivery::Scripts`] (EVALSHA, the
    /// default) or [`Delivery::Functions`] (FCALL of the script's function in
    /// [`functions_library`](crate::functions_library), loading the library when the
    /// server lacks it). Pipelines ([`PipelineExt`](crate::PipelineExt)) always send
    /// scripts.
    ///
    /// ```no_run
    /// use lockscript::Delivery;
    /// # fn main() -> Result<(), lockscript::LockError> {
    /// # let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// # let mut conn = client.get_connection()?;
    /// let renewed: i64 = lockscript::builtin::renew("lock:{a}", "token", 30_000)
    ///     .delivery(Delivery::Functions)
    ///     .invoke(&mut conn)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.fcall = match delivery {
            Delivery::Scripts => None,
            Delivery::Functions => {
                crate::script::functions::function_of(self.script).map(|function| {
                    let mut cmd = Cmd::with_capacity(self.cmd.args_iter().len(), 128);
                    cmd.arg(if self.script.read_only {
                        "FCALL_RO"
                    } else {
                        "FCALL"
                    })
                    .arg(&function.function);
                    for arg in self.cmd.args_iter().skip(2) {
                        if let redis::Arg::Simple(bytes) = arg {
                            cmd.arg(bytes);
                        }
                    }
                    cmd
                })
            }
        };
        self
    }

    /// The script this call runs.
    ///
    /// ```no_run
    /// let call = lockscript::builtin::compare_del("lock:{a}", "token");
    /// println!("{} {}", call.script().name(), call.script().sha1());
    /// ```
    pub fn script(&self) -> &'static Script {
        self.script
    }

    /// The `EVALSHA[_RO]` form of this call.
    pub(crate) fn evalsha_cmd(&self) -> &Cmd {
        &self.cmd
    }

    pub(crate) fn check_arguments(&self) -> Result<(), LockError> {
        if let Some(unusable) = self
            .guard
            .as_ref()
            .and_then(|g| g.unusable(self.script.name))
        {
            return Err(unusable);
        }
        match self.bad_argument {
            Some((parameter, count)) => Err(LockError::Argument {
                script: self.script.name,
                parameter,
                count,
            }),
            None => Ok(()),
        }
    }

    /// The same call as `EVAL` (or `EVAL_RO`) with the script's bytes.
    pub(crate) fn eval_cmd(&self) -> Cmd {
        let mut cmd =
            Cmd::with_capacity(self.cmd.args_iter().len(), self.script.bytes().len() + 64);
        cmd.arg(self.script.eval_name()).arg(self.script.bytes());
        for arg in self.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

impl<R: FromRedisValue> Invocation<R> {
    /// Runs the script on a sync connection: EVALSHA; if and only if the server answered
    /// `NOSCRIPT`, `SCRIPT LOAD` (the script stays cached for good) and EVALSHA again, or
    /// EVAL when the load failed (refused, or on a cluster a node unreachable).
    ///
    /// Any other failure is returned as is: after an I/O error or a timeout the script
    /// may have run, so it is never sent again. A `SCRIPT LOAD` that answers a digest
    /// other than the compiled one is [`LockError::DigestMismatch`], and nothing runs.
    ///
    /// Before that load (or, with [`Delivery::Functions`], the library's), a script that
    /// needs a newer server than some ([`Script::floor`]) asks the server's version
    /// (`INFO server`; on a Cluster connection every primary's, the oldest counting) and
    /// fails with [`LockError::ServerTooOld`] on one too old. A server that does not
    /// answer it (an ACL without `+info`) is not checked: the call goes on, and a server
    /// too old answers with its own error.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let mut conn = client.get_connection()?;
    /// let deleted: i64 = lockscript::builtin::compare_del("lock:{a}", "t").invoke(&mut conn)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn invoke<C: redis::ConnectionLike + ?Sized>(&self, con: &mut C) -> Result<R, LockError> {
        self.check_arguments()?;
        if let Some(fcall) = &self.fcall {
            // FCALL; when the function is missing, FUNCTION LOAD (which runs nothing) and
            // FCALL again.
            let reply = match con.req_command(fcall).and_then(Value::extract_error) {
                Err(err) if crate::script::functions::is_function_missing(&err) => {
                    self.check_floor(con)?;
                    crate::script::functions::loaded(
                        con.req_command(&crate::script::functions::load_cmd())
                            .and_then(Value::extract_error)
                            .map(drop),
                    )?;
                    con.req_command(fcall).and_then(Value::extract_error)
                }
                other => other,
            };
            return self.finish(reply);
        }
        let reply = match con.req_command(&self.cmd).and_then(Value::extract_error) {
            // One command at a time: a sync cluster connection routes a pipeline by its
            // first command, and `SCRIPT LOAD` has no key (alone, it goes to every node).
            // The load never runs the script, so after any failure of it EVAL is safe.
            Err(err) if is_noscript(&err) => {
                self.check_floor(con)?;
                let loaded = match con
                    .req_command(&self.script.load_cmd())
                    .and_then(Value::extract_error)
                {
                    Ok(digest) => {
                        self.script.check_loaded_reply(digest)?;
                        true
                    }
                    Err(_) => false,
                };
                match loaded.then(|| con.req_command(&self.cmd).and_then(Value::extract_error)) {
                    // Run, or failed for a reason of its own.
                    Some(reply) if !reply.as_ref().is_err_and(is_noscript) => reply,
                    // The load was refused, or the cache flushed in between: EVAL.
                    _ => con
                        .req_command(&self.eval_cmd())
                        .and_then(Value::extract_error),
                }
            }
            other => other,
        };
        self.finish(reply)
    }

    /// Runs the script on an async connection (multiplexed, managed, cluster...), with
    /// the same rule as [`invoke`](Self::invoke); after `NOSCRIPT`, `SCRIPT LOAD` and
    /// EVALSHA go in one round trip (a pipeline, which a cluster connection routes to the
    /// node of the script's first key), and EVAL only if the load was refused or the cache
    /// flushed in between.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockscript::LockError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// let mut conn = client.get_multiplexed_async_connection().await?;
    /// let deleted: i64 = lockscript::builtin::compare_del("lock:{a}", "t")
    ///     .invoke_async(&mut conn)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn invoke_async<C: redis::aio::ConnectionLike>(
        &self,
        con: &mut C,
    ) -> Result<R, LockError> {
        self.check_arguments()?;
        if let Some(fcall) = &self.fcall {
            let reply = match con
                .req_packed_command(fcall)
                .await
                .and_then(Value::extract_error)
            {
                Err(err) if crate::script::functions::is_function_missing(&err) => {
                    self.load_library_and_call(con, fcall).await?
                }
                other => other,
            };
            return self.finish(reply);
        }
        let reply = match con
            .req_packed_command(&self.cmd)
            .await
            .and_then(Value::extract_error)
        {
            Err(err) if is_noscript(&err) => self.load_and_run(con).await?,
            other => other,
        };
        self.finish(reply)
    }

    /// After "Function not found": `FUNCTION LOAD` of the library and FCALL in one round
    /// trip (routed by the call's key on a cluster). The outer error is a refused load,
    /// after which the FCALL found no function and ran nothing.
    #[cfg(feature = "tokio")]
    async fn load_library_and_call<C: redis::aio::ConnectionLike>(
        &self,
        con: &mut C,
        fcall: &Cmd,
    ) -> Result<Result<Value, RedisError>, LockError> {
        self.check_floor_async(con).await?;
        let (loaded, reply) =
            match load_then_call(con, crate::script::functions::load_cmd(), fcall).await {
                Ok(replies) => replies,
                Err(err) => return Ok(Err(err)),
            };
        match loaded {
            Err(err)
                if !crate::script::functions::already_loaded(&err)
                    && reply
                        .as_ref()
                        .is_err_and(crate::script::functions::is_function_missing) =>
            {
                Err(crate::script::functions::load_refused(err))
            }
            _ => Ok(reply),
        }
    }

    /// Reads this call's reply taken from a pipeline, as [`invoke`](Self::invoke) reads
    /// its own: the declared type, or the typed error (`NotHeld`, `Stale` for a guarded
    /// call, `Script`, `Permission`...). Query the pipeline as `Vec<redis::Value>` with
    /// `ignore_errors()`, so one refused call does not hide the others' replies.
    ///
    /// ```no_run
    /// use lockscript::PipelineExt;
    /// use lockscript::builtin::renew;
    /// # fn main() -> Result<(), lockscript::LockError> {
    /// # let client = redis::Client::open("redis://127.0.0.1:6390/")?;
    /// # let mut conn = client.get_connection()?;
    /// let call = renew("lock:{a}", "token-a", 30_000);
    /// let mut pipe = redis::pipe();
    /// pipe.ignore_errors();
    /// pipe.invoke(&call)?;
    /// let mut replies: Vec<redis::Value> = pipe.query(&mut conn)?;
    /// let renewed: i64 = call.read(replies.remove(0))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read(&self, reply: Value) -> Result<R, LockError> {
        self.finish(reply.extract_error())
    }

    /// After `NOSCRIPT`: `SCRIPT LOAD` and EVALSHA in one round trip; EVAL when the load
    /// was refused (then EVALSHA answered `NOSCRIPT` and ran nothing) or the script was
    /// flushed in between. The outer error is a digest the server computed differently.
    #[cfg(feature = "tokio")]
    async fn load_and_run<C: redis::aio::ConnectionLike>(
        &self,
        con: &mut C,
    ) -> Result<Result<Value, RedisError>, LockError> {
        self.check_floor_async(con).await?;
        let (loaded, reply) = match load_then_call(con, self.script.load_cmd(), &self.cmd).await {
            Ok(replies) => replies,
            Err(err) => return Ok(Err(err)),
        };
        match loaded {
            Ok(digest) => {
                self.script.check_loaded_reply(digest)?;
                match reply {
                    Err(err) if is_noscript(&err) => {}
                    other => return Ok(other),
                }
            }
            // Refused: the EVALSHA after it found no script and ran nothing.
            Err(_) if reply.as_ref().is_err_and(is_noscript) => {}
            Err(_) => return Ok(reply),
        }
        Ok(con
            .req_packed_command(&self.eval_cmd())
            .await
            .and_then(Value::extract_error))
    }

    /// The script's first call on a server (its `NOSCRIPT`, or its function missing):
    /// refuses a server older than the script needs, before anything is loaded. On a
    /// Cluster connection every primary is asked, and the oldest counts
    /// ([`ServerInfo`]).
    fn check_floor<C: redis::ConnectionLike + ?Sized>(&self, con: &mut C) -> Result<(), LockError> {
        if self.script.floor.is_empty() {
            return Ok(());
        }
        ServerInfo::read(con.req_command(&ServerInfo::cmd())).check(self.script)
    }

    /// [`check_floor`](Self::check_floor) on an async connection.
    #[cfg(feature = "tokio")]
    async fn check_floor_async<C: redis::aio::ConnectionLike>(
        &self,
        con: &mut C,
    ) -> Result<(), LockError> {
        if self.script.floor.is_empty() {
            return Ok(());
        }
        ServerInfo::read(con.req_packed_command(&ServerInfo::cmd()).await).check(self.script)
    }

    fn finish(&self, reply: Result<Value, RedisError>) -> Result<R, LockError> {
        if let (Some(guard), Err(err)) = (&self.guard, &reply)
            && let Some(refusal) = err
                .code()
                .and_then(|code| guard.refusal(code, err.detail()))
        {
            return Err(refusal);
        }
        match reply {
            Ok(value) => redis::from_redis_value(value).map_err(|e| LockError::UnexpectedReply {
                script: self.script.name,
                expected: std::any::type_name::<R>(),
                source: e.into(),
            }),
            // The server did not run it and says to try again later: not the script's fault.
            Err(err) if crate::error::is_retry_later(&err) => Err(LockError::Redis(err)),
            // Nor when the connection never logged in (a password missing from the URL).
            Err(err) if err.code() == Some("NOAUTH") => Err(LockError::Redis(err)),
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::CrossSlot) => {
                Err(LockError::CrossSlot {
                    script: self.script.name,
                    source: err,
                })
            }
            Err(err) if matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
                if let Some(unsupported) = crate::script::functions::refusal(self.script, &err) {
                    return Err(unsupported);
                }
                let message = server_message(&err);
                if let Some(too_old) = self.script.lacking(&message) {
                    return Err(too_old);
                }
                if is_permission_error(&err, &message) {
                    return Err(LockError::Permission {
                        script: self.script.name,
                        command: refused_command(self.script, &message),
                        message,
                    });
                }
                Err(LockError::Script {
                    script: self.script.name,
                    at: error_place(self.script, &message),
                    message,
                    source: err,
                })
            }
            Err(err) => Err(LockError::Redis(err)),
        }
    }
}

/// `load` (`SCRIPT LOAD` or `FUNCTION LOAD`) and `call` in one round trip (a pipeline,
/// which a cluster connection routes by the call's key): each one's reply. `Err` when the
/// round trip itself failed: the call may have run, so it is never sent again.
#[cfg(feature = "tokio")]
async fn load_then_call<C: redis::aio::ConnectionLike>(
    con: &mut C,
    load: Cmd,
    call: &Cmd,
) -> Result<(Result<Value, RedisError>, Result<Value, RedisError>), RedisError> {
    let mut pipe = redis::pipe();
    pipe.add_command(load).add_command(call.clone());
    let mut replies = con.req_packed_commands(&pipe, 0, 2).await?.into_iter();
    match (replies.next(), replies.next()) {
        (Some(loaded), Some(reply)) => Ok((loaded.extract_error(), reply.extract_error())),
        _ => Err(RedisError::from((
            ErrorKind::Client,
            "a pipeline of two commands answered fewer replies",
        ))),
    }
}

/// `NOPERM` (keys, channels, the script command itself), or a server's reply for a
/// command, key or channel the user may not use from inside a script. Servers word the
/// latter differently: Redis 7.0 "The user executing the script can't run this
/// command...", Redis 7.2+, 8.x and Valkey "ACL failure in script: ...".
fn is_permission_error(err: &RedisError, message: &str) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || message.starts_with("NOPERM")
        || message.contains("ACL failure in script")
        || message.contains("The user executing the script can't")
}

/// The command a permission error refers to: named in the message by newer servers
/// ("no permissions to run the 'publish' command"), else read from the script's source
/// at the line the server names (`... on @user_script:17.`).
/// Where in its files the line a server's error names is: `@user_script:N` of the script
/// as sent, or `@user_function:N` of the Functions library, where the script starts at
/// its function's first line.
fn error_place(script: &Script, message: &str) -> Option<String> {
    let Some((_, after)) = message.rsplit_once("@user_function:") else {
        return script.place_of_error(message);
    };
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    let line: usize = digits.parse().ok()?;
    let first_line = crate::script::functions::function_of(script)?.first_line;
    script.place(line.checked_sub(first_line)? + 1)
}

fn refused_command(script: &Script, message: &str) -> Option<String> {
    // A function's lines are the library's: its script starts at its `first_line`.
    let first_line = if message.contains("@user_function:") {
        crate::script::functions::function_of(script)?.first_line
    } else {
        1
    };
    refused_command_at(script.source, message, first_line)
}

/// [`refused_command`] for `source` whose line 1 is line `first_line` of what the server
/// ran.
fn refused_command_at(source: &str, message: &str, first_line: usize) -> Option<String> {
    if let Some((_, rest)) = message.split_once("to run the '")
        && let Some((name, _)) = rest.split_once('\'')
    {
        return Some(name.to_ascii_uppercase());
    }
    if !message.contains("run this command") {
        // A key or a channel was refused, not a command.
        return None;
    }
    let line: usize = message
        .split("@user_script:")
        .nth(1)
        .or_else(|| message.split("@user_function:").nth(1))?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let text = source.lines().nth(line.checked_sub(first_line)?)?;
    let call = text
        .find("redis.call")
        .or_else(|| text.find("redis.pcall"))?;
    let rest = &text[call..];
    let quote = rest.find(['\'', '"'])?;
    let delimiter = rest[quote..].chars().next()?;
    let name = rest[quote + 1..].split(delimiter).next()?;
    Some(name.to_ascii_uppercase())
}

fn is_noscript(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

impl<R> fmt::Debug for Invocation<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocation")
            .field("script", &self.script.name)
            .field("sha1", &self.script.sha1)
            .field("arguments", &self.cmd.args_iter().len().saturating_sub(3))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::refused_command_at as refused_command_in;

    fn refused_command(source: &str, message: &str) -> Option<String> {
        refused_command_in(source, message, 1)
    }

    #[test]
    fn the_refused_command_is_read_from_the_named_line() {
        let source = "-- header\nif redis.call('GET', KEYS[1]) == ARGV[1] then\n  redis.call(\"PUBLISH\", KEYS[1] .. ':x', 'y')\nend\n";
        let message = "ERR The user executing the script can't run this command or subcommand script: abc, on @user_script:3.";
        assert_eq!(refused_command(source, message).as_deref(), Some("PUBLISH"));
        assert_eq!(
            refused_command(source, "NOPERM no permissions to access one of the keys"),
            None
        );
        assert_eq!(refused_command(source, "on @user_script:99."), None);
        // The same line of a function whose script starts at line 10 of its library.
        let message = "ERR The user executing the script can't run this command or subcommand script: lockscript_x, on @user_function:12.";
        assert_eq!(
            refused_command_in(source, message, 10).as_deref(),
            Some("PUBLISH")
        );
    }

    #[test]
    fn newer_servers_name_the_refused_command_themselves() {
        // Redis 8.2 and Valkey 9.1, as they reply.
        let message = "ERR ACL failure in script: User u has no permissions to run the 'incr' command script: da1f0beec269d2613800f28978af642ab6536067, on @user_script:1.";
        assert_eq!(refused_command("", message).as_deref(), Some("INCR"));
        let key =
            "ERR ACL failure in script: No permissions to access a key script: on @user_script:1.";
        assert_eq!(refused_command("redis.call('SET', KEYS[1])", key), None);
    }
}
