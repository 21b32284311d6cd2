//! Static analysis of Redis Lua scripts: the checks `#[lock_script]` runs at compile
//! time, as a library, so the `lockscript` command-line auditor runs exactly the same
//! ones over plain files (the two can never disagree).
//!
//! - [`lua::analyze`] parses a script as Lua 5.1 (the dialect Redis runs), reads its
//!   `#!lua` shebang, finds the highest literal `KEYS[n]` / `ARGV[n]`, and lints every
//!   literal `redis.call` / `redis.pcall` command against [`commands`], the table of
//!   which command exists on which server of the test matrix (a command that only some
//!   have is a warning): its arity and subcommands too, through aliases, wrapper
//!   functions and `pcall`; [`scope`] finds globals Redis's Lua does not define.
//! - [`include::expand`] expands `--- @include` lines into the body that is sent.
//! - [`floor::Floor`] is the oldest Redis and Valkey a script runs on.
//! - [`guarded::wrap`] writes the owner-guarded form of a script.
//! - [`functions::library`] writes the scripts as one Redis Functions library.
//! - [`audit::audit_dir`] does that for every script of a directory (and below it) and
//!   checks the directory's `SHA1SUMS`.
//!
//! ```
//! let analysis = lockscript_audit::lua::analyze("return redis.call('SLEEP', KEYS[1])");
//! assert_eq!(analysis.keys.highest, 1);
//! assert_eq!(analysis.problems[0].message, "`SLEEP` is not a Redis command");
//! ```
#![forbid(unsafe_code)]

pub mod audit;
pub mod commands;
pub mod floor;
pub mod functions;
pub mod guarded;
pub mod include;
pub mod lua;
mod problem;
pub mod scope;

/// The SHA1 of `bytes` as 40 lowercase hex digits: what `sha1sum` prints and what
/// `SCRIPT LOAD` returns for a script with exactly these bytes.
///
/// ```
/// assert_eq!(lockscript_audit::sha1_hex(b"return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
/// ```
pub fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}
