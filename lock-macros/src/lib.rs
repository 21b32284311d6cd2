//! `#[lock_script("scripts/x.lua")]`: a Redis Lua script as a typed Rust function.
//!
//! Use it through `lockscript`, which re-exports it; the runtime documents the
//! generated API. This crate is only the entry point; the phases live in modules:
//! `args` parses the attribute, `item` the bodyless function, `source` reads and
//! hashes the file, `lockscript_audit` (shared with the `lockscript` CLI) analyses the script,
//! `check` holds the script against the
//! signature, `reply` its returns against the declared return type, and `expand` writes
//! the function.
#![forbid(unsafe_code)]

mod args;
mod check;
mod expand;
mod item;
mod reply;
mod source;
mod test_attr;

use proc_macro::TokenStream;

/// Turns a bodyless function into a typed call of a Redis Lua script.
///
/// ```ignore
/// use lockscript::lock_script;
///
/// /// Deletes the lock only while it still holds our token.
/// #[lock_script("scripts/compare-del.lua")]
/// pub fn compare_del(#[key] lock: &str, token: &str) -> i64;
/// ```
///
/// The path is relative to the declaring crate's `CARGO_MANIFEST_DIR`. Optional
/// arguments: `guarded` makes the function take a guard first (`guard: &impl
/// lockscript::Guarded`) and run the script only while that guard holds its lock (the file
/// is sent wrapped by `lockscript_audit::guarded::wrap`; `lockscript wrap FILE` prints it),
/// `sha1 = "<40 hex>"` pins the reviewed digest (the build fails when the file
/// changes), `requires = "redis 7.0, valkey 8.0"` declares the oldest servers the script
/// must run on, `crate = "path"` names the runtime crate when it was renamed.
///
/// `--- @include "relative/path"` lines (bull's and BullMQ's form) are expanded by
/// `lockscript_audit::include`, each file once; the expanded body is what is hashed and
/// sent, and every included file is tracked so that editing it rebuilds.
///
/// Checked at compile time, all problems reported in one build, each at the file and
/// line it is in (an included file's own): the file and its includes exist, with no
/// cycle; it parses as Lua 5.1; it reads or assigns no global that neither it, its
/// includes nor Redis's Lua define; the highest `KEYS[n]` equals the number of `#[key]`
/// parameters and the highest `ARGV[n]` the number of the others, and a script that
/// reads either by count has a slice parameter for it; every literal
/// `redis.call`/`redis.pcall` command (directly, through an alias or a wrapper function,
/// or in `pcall`) exists, with its subcommand and a literal argument count within its
/// arity, may run in a script, and does not write in a `#!lua flags=no-writes` script;
/// no key is written into the script (a string or number literal where the command
/// certainly takes a key, `redis.call('GET', 'config:limit')`, is an error on every
/// server: pass it in `KEYS`; a key built from one, `KEYS[1] .. id`, is not flagged);
/// shebang flags are known; the pin matches; `requires` is met; each parameter type can
/// be sent and the return type read (`lockscript::ScriptArg` / `ScriptReply`); and the
/// declared return type can read every reply the script may give, on every path
/// (`lockscript_audit::reply`: `GET`'s nil needs an `Option`, `HGETALL`'s array a `Vec`
/// or a map, a Lua number that may have a fraction is sent cut to an integer, so an
/// `f64` needs it returned as `tostring(x)`; each error names the `return`'s file and
/// line). A reply the analysis cannot know (a computed command, a value from `ARGV`,
/// `cjson.decode`) and a type it cannot judge (a type of your own, an alias,
/// `redis::Value`) are never an error. A file
/// that is not UTF-8 is sent as it is and checked as text. A command that only some
/// servers of the test matrix have (Valkey's `DELIFEQ`, Redis 8.2's `XACKDEL`) is a
/// warning at the attribute, naming the servers that lack it (shown as the use of a
/// deprecated item, the one warning a macro can raise on stable Rust;
/// `#[allow(deprecated)]` on the function, or a `requires` the script meets, silences it).
#[proc_macro_attribute]
pub fn lock_script(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::lock_script(attr.into(), item.into()).into()
}

/// Runs a test against a clean, private Redis, once per server of the matrix
/// (`REDIS_SERVER_BIN`, one binary or several): use it as `#[lockscript_test::test]`
/// through the `lockscript-test` crate, which re-exports it and documents it.
///
/// Options: `fixtures("tests/fixtures/x.redis", ...)` (files of redis-cli commands,
/// relative to the crate's Cargo.toml, embedded, and checked at compile time: each line
/// parses, and names a command with its subcommand and a number of arguments the command
/// table allows; each problem is an error at the attribute naming the file and line),
/// `flavor = "multi_thread"` for an async test on a multi-thread runtime, and
/// `crate = "path"` when `lockscript-test` was renamed.
#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    test_attr::test(attr.into(), item.into()).into()
}
