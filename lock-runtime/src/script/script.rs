//! A compiled script: its source and digest, what it needs of a server, and the traits
//! its parameters and reply go through. A call of it is an [`Invocation`](crate::Invocation).

use std::fmt;

use redis::{Cmd, RedisError, Value};

use crate::LockError;

/// How many `KEYS` or `ARGV` entries a script takes.
///
/// ```no_run
/// use lockscript::Arity;
/// let script = lockscript::builtin::compare_del("lock:{a}", "t").script();
/// assert_eq!(script.keys(), Arity::Exactly(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arity {
    /// Always this many.
    Exactly(usize),
    /// This many fixed ones, then a variadic slice.
    AtLeast(usize),
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exactly(n) => write!(f, "{n}"),
            Self::AtLeast(n) => write!(f, "{n}+"),
        }
    }
}

/// A Lua script compiled into the binary by `#[lock_script]`.
///
/// Every field was fixed at compile time; the digest is the SHA1 of exactly the bytes
/// sent, [`bytes`](Self::bytes). Every delivery (`EVAL`, `SCRIPT LOAD`, the Functions
/// library, pipelines) sends those bytes; [`source`](Self::source) is their text, for
/// reading and analysis only.
///
/// ```no_run
/// for script in lockscript::scripts() {
///     println!("{} {} {}", script.sha1(), script.name(), script.path());
/// }
/// ```
pub struct Script {
    pub(crate) name: &'static str,
    path: &'static str,
    pub(crate) source: &'static str,
    pub(crate) sha1: &'static str,
    keys: Arity,
    args: Arity,
    pub(crate) read_only: bool,
    flags: &'static [&'static str],
    /// The files the source is made of (the script, then what it `@include`s), as paths
    /// relative to the declaring crate's manifest.
    parts: &'static [&'static str],
    /// For each line of the source, the index in `parts` and the line there, as pairs
    /// (`u16::MAX` for a line of a guarded script's guard); empty when the source is the
    /// script's file line for line.
    lines: &'static [(u16, u32)],
    /// The oldest server of each product that runs it: `(product, version, what needs
    /// it)`, an empty version when no version does. A product not listed: any version.
    pub(crate) floor: &'static [(&'static str, &'static str, &'static str)],
    /// The exact bytes sent, when the file is not UTF-8 (`source` is then its text with
    /// U+FFFD in place of what is not).
    bytes: Option<&'static [u8]>,
}

impl Script {
    /// Not public API: the macro's constructor.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub const fn __new(
        name: &'static str,
        path: &'static str,
        source: &'static str,
        sha1: &'static str,
        keys: Arity,
        args: Arity,
        read_only: bool,
        flags: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            path,
            source,
            sha1,
            keys,
            args,
            read_only,
            flags,
            parts: &[],
            lines: &[],
            floor: &[],
            bytes: None,
        }
    }

    /// Not public API: the exact bytes of a script file that is not UTF-8.
    #[doc(hidden)]
    #[must_use]
    pub const fn __with_bytes(self, bytes: &'static [u8]) -> Self {
        Self {
            bytes: Some(bytes),
            ..self
        }
    }

    /// The bytes sent to the server, which its digest is computed over: the source's,
    /// or, for a script file that is not UTF-8, the file's exact bytes (Redis runs any
    /// bytes; [`source`](Self::source) then shows U+FFFD in place of what is not UTF-8).
    ///
    /// ```no_run
    /// let script = lockscript::builtin::renew("k", "t", 1).script();
    /// assert_eq!(script.bytes(), script.source().as_bytes());
    /// ```
    pub fn bytes(&self) -> &'static [u8] {
        match self.bytes {
            Some(bytes) => bytes,
            None => self.source.as_bytes(),
        }
    }

    /// Not public API: the macro gives the oldest servers that run the script.
    #[doc(hidden)]
    #[must_use]
    pub const fn __with_floor(
        self,
        floor: &'static [(&'static str, &'static str, &'static str)],
    ) -> Self {
        Self { floor, ..self }
    }

    /// The oldest server of each product that runs the script, as `(product, version,
    /// what needs it)`: `("Redis", "7.0.0", "the `#!lua` shebang")`. An empty version
    /// means no version of that product runs it; a product not listed, any version.
    ///
    /// ```no_run
    /// for (product, version, why) in lockscript::builtin::renew("k", "t", 1).script().floor() {
    ///     println!("{product} {version} ({why})");
    /// }
    /// ```
    pub fn floor(&self) -> &'static [(&'static str, &'static str, &'static str)] {
        self.floor
    }

    /// The script's error when the server answered that a command it calls does not
    /// exist, and the script calls one that only newer servers have: where the server's
    /// version was not asked first (a pipeline, a transaction), the reply still says
    /// [`LockError::ServerTooOld`], naming what the script needs. `None` for any other
    /// error, or a script every server runs (then the command is unknown everywhere).
    pub(crate) fn lacking(&self, message: &str) -> Option<LockError> {
        // Redis: "Unknown Redis command called from script"; Valkey: "Unknown command...".
        let unknown = message.contains("Unknown Redis command called from script")
            || message.contains("Unknown command called from script");
        if !unknown || self.floor.is_empty() {
            return None;
        }
        let needs = self
            .floor
            .iter()
            .map(|(product, version, because)| {
                if version.is_empty() {
                    format!("a server other than {product} (none has {because})")
                } else {
                    format!("{product} {version} or later (for {because})")
                }
            })
            .collect::<Vec<_>>()
            .join(", or ");
        Some(LockError::ServerTooOld {
            script: self.name,
            needs,
            server: "one without a command the script calls (it answered: unknown command)"
                .to_owned(),
        })
    }

    /// Refuses a server older than the script needs, from its `INFO server` text.
    pub(crate) fn check_server(&self, info: &str) -> Result<(), LockError> {
        let Some((product, version)) = server_of(info) else {
            return Ok(());
        };
        for (needed_product, needed, because) in self.floor {
            if !needed_product.eq_ignore_ascii_case(product) {
                continue;
            }
            let refused = needed.is_empty() || numbers(needed) > numbers(version);
            if refused {
                let needs = if needed.is_empty() {
                    format!("a server other than {product} (none has {because})")
                } else {
                    format!("{product} {needed} or later (for {because})")
                };
                return Err(LockError::ServerTooOld {
                    script: self.name,
                    needs,
                    server: format!("{product} {version}"),
                });
            }
        }
        Ok(())
    }

    /// Not public API: the macro gives the files of a script with includes and where each
    /// line of its source comes from.
    #[doc(hidden)]
    #[must_use]
    pub const fn __with_parts(
        self,
        parts: &'static [&'static str],
        lines: &'static [(u16, u32)],
    ) -> Self {
        Self {
            parts,
            lines,
            ..self
        }
    }

    /// The files the script is made of: its own, then each file it `@include`s, as paths
    /// relative to the declaring crate's manifest. Just [`path`](Self::path) for a script
    /// that includes nothing.
    ///
    /// ```no_run
    /// for part in lockscript::builtin::renew("k", "t", 1).script().parts() {
    ///     println!("{part}");
    /// }
    /// ```
    pub fn parts(&self) -> Vec<&'static str> {
        if self.parts.is_empty() {
            vec![self.path]
        } else {
            self.parts.to_vec()
        }
    }

    /// Where line `line` (1-based) of the sent source comes from: the file (the
    /// script's own, or the included file's) and its line there, as `path:line`. `None`
    /// when the line is out of range or one of a guarded script's guard.
    ///
    /// ```no_run
    /// let script = lockscript::builtin::renew("k", "t", 1).script();
    /// assert_eq!(script.place(1).as_deref(), Some("scripts/renew.lua:1"));
    /// ```
    pub fn place(&self, line: usize) -> Option<String> {
        if line == 0 {
            return None;
        }
        if self.lines.is_empty() {
            return (line <= self.source.lines().count().max(1))
                .then(|| format!("{}:{line}", self.path));
        }
        let (part, there) = self.lines.get(line - 1)?;
        let path = self.parts.get(usize::from(*part))?;
        Some(format!("{path}:{there}"))
    }

    /// The place of the line a server's error message names (`... on @user_script:13.`).
    pub(crate) fn place_of_error(&self, message: &str) -> Option<String> {
        let after = message.rsplit_once("@user_script:")?.1;
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        self.place(digits.parse().ok()?)
    }

    /// The file stem, e.g. `compare-del`.
    ///
    /// ```no_run
    /// assert_eq!(lockscript::builtin::compare_del("k", "t").script().name(), "compare-del");
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The path as written in the attribute, relative to the declaring crate's manifest.
    ///
    /// ```no_run
    /// println!("{}", lockscript::builtin::renew("k", "t", 1).script().path());
    /// ```
    pub fn path(&self) -> &'static str {
        self.path
    }

    /// The embedded Lua source as text: byte for byte the reviewed file when it is UTF-8,
    /// else with U+FFFD in place of what is not. To read or show; what is sent is
    /// [`bytes`](Self::bytes).
    ///
    /// ```no_run
    /// print!("{}", lockscript::builtin::renew("k", "t", 1).script().source());
    /// ```
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The SHA1 of [`bytes`](Self::bytes) as 40 lowercase hex digits, computed at compile
    /// time. It is what `sha1sum` prints for the file and what `SCRIPT LOAD` returns.
    ///
    /// ```no_run
    /// assert_eq!(lockscript::builtin::renew("k", "t", 1).script().sha1().len(), 40);
    /// ```
    pub fn sha1(&self) -> &'static str {
        self.sha1
    }

    /// How many `KEYS` the script takes.
    ///
    /// ```no_run
    /// use lockscript::Arity;
    /// assert_eq!(lockscript::builtin::renew("k", "t", 1).script().keys(), Arity::Exactly(1));
    /// ```
    pub fn keys(&self) -> Arity {
        self.keys
    }

    /// How many `ARGV` entries the script takes.
    ///
    /// ```no_run
    /// use lockscript::Arity;
    /// assert_eq!(lockscript::builtin::renew("k", "t", 1).script().args(), Arity::Exactly(2));
    /// ```
    pub fn args(&self) -> Arity {
        self.args
    }

    /// Declared `#!lua flags=no-writes`: sent as EVALSHA_RO / EVAL_RO, so it may run on
    /// replicas and is refused by the server if it tries to write.
    ///
    /// ```no_run
    /// assert!(!lockscript::builtin::renew("k", "t", 1).script().read_only());
    /// ```
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The flags of the `#!lua flags=...` shebang, empty when there is none.
    ///
    /// ```no_run
    /// assert!(lockscript::builtin::renew("k", "t", 1).script().flags().is_empty());
    /// ```
    pub fn flags(&self) -> &'static [&'static str] {
        self.flags
    }

    pub(crate) fn evalsha_name(&self) -> &'static str {
        if self.read_only {
            "EVALSHA_RO"
        } else {
            "EVALSHA"
        }
    }

    pub(crate) fn eval_name(&self) -> &'static str {
        if self.read_only { "EVAL_RO" } else { "EVAL" }
    }

    pub(crate) fn load_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.bytes());
        cmd
    }

    /// Checks the reply of `SCRIPT LOAD` (a digest) against the compiled one.
    pub(crate) fn check_loaded_reply(&self, reply: Value) -> Result<(), LockError> {
        let digest: String =
            redis::from_redis_value(reply).map_err(|e| LockError::UnexpectedReply {
                script: self.name,
                expected: "a SCRIPT LOAD digest",
                source: e.into(),
            })?;
        self.check_loaded(digest)
    }

    /// Checks the digest `SCRIPT LOAD` returned against the compiled one.
    pub(crate) fn check_loaded(&self, server: String) -> Result<(), LockError> {
        if server.eq_ignore_ascii_case(self.sha1) {
            Ok(())
        } else {
            Err(LockError::DigestMismatch {
                script: self.name,
                compiled: self.sha1,
                server,
            })
        }
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("sha1", &self.sha1)
            .field("keys", &self.keys)
            .field("args", &self.args)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// The product and version an `INFO server` reply names: Valkey by its
/// `valkey_version` (it also reports the Redis version it forked from), Redis otherwise.
pub(crate) fn server_of(info: &str) -> Option<(&'static str, &str)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    match field("valkey_version") {
        Some(v) => Some(("Valkey", v)),
        None => field("redis_version").map(|v| ("Redis", v)),
    }
}

/// What `INFO server` says of the servers a connection reaches, oldest first: the one
/// server, or on a Cluster connection each primary (redis-rs sends `INFO` to every
/// primary and answers a map of node address to text). On a Cluster every primary is
/// held to a script's floor, so the oldest counts: a slot can move to any primary
/// (resharding, a failover), `load_scripts` loads on each, and a call cannot ask `INFO`
/// of the node its key routes to through a connection that routes by key.
///
/// A server that refuses the question (an ACL without `+info`), a node that answers an
/// error, or a reply without a version is not checked: the call or load then goes on,
/// and a server too old for the script answers with its own error. That is logged
/// (`tracing`, debug) and said in the docs of `invoke` and `load_scripts`.
pub(crate) struct ServerInfo {
    texts: Vec<String>,
}

impl ServerInfo {
    /// The question: `INFO server`.
    pub(crate) fn cmd() -> Cmd {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        cmd
    }

    /// Reads the answer to [`cmd`](Self::cmd), whatever its shape.
    pub(crate) fn read(reply: Result<Value, RedisError>) -> Self {
        let mut texts = Vec::new();
        match reply {
            Ok(value) => collect_infos(value, &mut texts),
            Err(err) => {
                tracing::debug!(error = %err, "INFO server refused: scripts' oldest servers not checked");
            }
        }
        texts.retain(|text| {
            let known = server_of(text).is_some();
            if !known {
                tracing::debug!("INFO server names no version: that server is not checked");
            }
            known
        });
        texts.sort_by_cached_key(|text| server_of(text).map(|(_, v)| numbers(v)));
        Self { texts }
    }

    /// Refuses when a server it describes is older than `script` needs, naming the
    /// oldest such server.
    pub(crate) fn check(&self, script: &Script) -> Result<(), LockError> {
        self.texts
            .iter()
            .try_for_each(|text| script.check_server(text))
    }
}

/// The `INFO` texts in `value`: a text, or a map of node to text (a node's error is left
/// out, and said so in the log).
fn collect_infos(value: Value, texts: &mut Vec<String>) {
    match value {
        Value::Map(nodes) => {
            for (_, node) in nodes {
                collect_infos(node, texts);
            }
        }
        Value::ServerError(err) => {
            tracing::debug!(error = ?err, "a node refused INFO server: it is not checked");
        }
        other => match redis::from_redis_value::<String>(other) {
            Ok(text) => texts.push(text),
            Err(err) => tracing::debug!(error = %err, "an INFO server reply is not text"),
        },
    }
}

/// "7.0.15" as numbers, for comparing.
fn numbers(version: &str) -> Vec<u32> {
    version.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// The error line as the server sent it: `ERR something`, `boom: details`.
pub(crate) fn server_message(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::{Arity, Script, ServerInfo};
    use crate::LockError;

    static HGETDEL: Script = Script::__new(
        "hgetdel",
        "lua/hgetdel.lua",
        "return redis.call('HGETDEL', KEYS[1], 'FIELDS', 1, ARGV[1])[1]",
        "0000000000000000000000000000000000000000",
        Arity::Exactly(1),
        Arity::Exactly(1),
        false,
        &[],
    )
    .__with_floor(&[("Redis", "8.0.0", "`HGETDEL`")]);

    fn info(version: &str) -> Value {
        Value::BulkString(
            format!("# Server\r\nredis_version:{version}\r\nredis_mode:cluster\r\n").into_bytes(),
        )
    }

    fn node(port: u16, reply: Value) -> (Value, Value) {
        (
            Value::BulkString(format!("127.0.0.1:{port}").into_bytes()),
            reply,
        )
    }

    #[test]
    fn an_unknown_command_reply_is_server_too_old_for_a_script_with_a_floor() {
        for message in [
            "ERR Unknown Redis command called from script script: 6be3f3d3, on @user_script:1.",
            "ERR Unknown command called from script script: on @user_script:1.",
        ] {
            let err = HGETDEL.lacking(message).unwrap();
            assert!(
                matches!(&err, LockError::ServerTooOld { needs, .. }
                    if needs == "Redis 8.0.0 or later (for `HGETDEL`)"),
                "{err:?}"
            );
        }
        assert!(HGETDEL.lacking("ERR wrong number of arguments").is_none());
        let anywhere = Script {
            floor: &[],
            ..HGETDEL
        };
        assert!(
            anywhere
                .lacking("ERR Unknown command called from script")
                .is_none()
        );
    }

    #[test]
    fn on_a_cluster_the_oldest_primary_is_named() {
        let reply = Value::Map(vec![
            node(7001, info("8.2.1")),
            node(7002, info("7.0.15")),
            node(7003, info("7.2.4")),
        ]);
        let err = ServerInfo::read(Ok(reply)).check(&HGETDEL).unwrap_err();
        assert!(
            matches!(&err, LockError::ServerTooOld { server, .. } if server == "Redis 7.0.15"),
            "{err:?}"
        );
        let reply = Value::Map(vec![node(7001, info("8.2.1")), node(7002, info("8.0.0"))]);
        assert!(ServerInfo::read(Ok(reply)).check(&HGETDEL).is_ok());
    }

    #[test]
    fn a_node_that_refuses_is_left_out_and_the_others_still_count() {
        let refused =
            redis::parse_redis_value(b"-NOPERM User may not run the 'info' command\r\n").unwrap();
        assert!(matches!(refused, Value::ServerError(_)), "{refused:?}");
        let reply = Value::Map(vec![
            node(7001, refused.clone()),
            node(7002, info("7.0.15")),
        ]);
        assert!(ServerInfo::read(Ok(reply)).check(&HGETDEL).is_err());
        // Nothing answered: nothing to hold the script to.
        let reply = Value::Map(vec![node(7001, refused)]);
        assert!(ServerInfo::read(Ok(reply)).check(&HGETDEL).is_ok());
        assert!(
            ServerInfo::read(Ok(info("7.0.15")))
                .check(&HGETDEL)
                .is_err()
        );
    }
}
