//! Static analysis of Redis Lua scripts: the checks `#[lock_script]` runs at compile
//! time, as a library, so the `lockscript` command-line auditor runs exactly the same
//! ones over plain files (the two can never disagree).
//!
//! - [`lua::analyze`] parses a script as Lua 5.1 (the dialect Redis runs), reads its
//!   `#!lua` shebang, finds the highest literal `KEYS[n]` / `ARGV[n]`, and lints every
//!   literal `redis.call` / `redis.pcall` command against [`commands`], the table of
//!   which command exists on which server of the test matrix (a command that only some
//!   have is a warning): its arity and subcommands too, and a key written into the script
//!   where the command takes one (the table's key positions), through aliases, wrapper
//!   functions and `pcall`; [`scope`] finds globals the servers' Lua does not define
//!   ([`globals`], per server).
//! - [`reply`]: what each `return` of a script may give ([`lua::Analysis::returns`]),
//!   from the commands' replies ([`commands::reply`]) and Lua's rules, and what a declared
//!   Rust type accepts ([`reply::Declared`]).
//! - [`fixture::check`] reads a fixture file of redis-cli commands (the data a script test
//!   starts from) and holds each command against the same table.
//! - [`include::expand`] expands `--- @include` lines into the body that is sent.
//! - [`floor::Floor`] is the oldest Redis and Valkey a script runs on.
//! - [`guarded::wrap`] writes the owner-guarded form of a script.
//! - [`functions::library`] writes the scripts as one Redis Functions library.
//! - [`audit::audit_dir`] does that for every script of a directory (and below it) and
//!   checks the directory's `SHA1SUMS`.
//! - [`inspect::inspect`] (feature `cli`) reads the locks on a live server, read-only:
//!   holders, fencing tokens, waiters (`lockscript inspect`).
//!
//! The parts that parse Lua (`lua`, `shebang`, `scope`, `include`, `floor`, `audit`) and
//! the `globals` table they check against are behind the `analysis` feature (on with the
//! default `cli`); the rest writes text and needs no parser.
//!
//! ```
//! # #[cfg(feature = "analysis")] {
//! let analysis = lockscript_audit::lua::analyze("return redis.call('SLEEP', KEYS[1])");
//! assert_eq!(analysis.keys.highest, 1);
//! assert_eq!(analysis.problems[0].message, "`SLEEP` is not a Redis command");
//! # }
//! ```
#![forbid(unsafe_code)]

#[cfg(feature = "analysis")]
pub mod audit;
pub mod commands;
pub mod fixture;
#[cfg(feature = "analysis")]
pub mod floor;
pub mod functions;
#[cfg(feature = "analysis")]
pub mod globals;
pub mod guarded;
#[cfg(feature = "analysis")]
pub mod include;
#[cfg(feature = "cli")]
pub mod inspect;
#[cfg(feature = "analysis")]
pub mod lua;
mod problem;
pub mod reply;
#[cfg(feature = "analysis")]
pub mod scope;
#[cfg(feature = "analysis")]
pub mod shebang;

/// The SHA1 of `bytes` as 40 lowercase hex digits: what `sha1sum` prints and what
/// `SCRIPT LOAD` returns for a script with exactly these bytes.
///
/// ```
/// assert_eq!(lockscript_audit::sha1_hex(b"return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
/// ```
pub fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}
