//! What a script replies, checked against what its caller declares.
//!
//! `#[lock_script]` holds the declared Rust return type against every `return` of the
//! script, so a reply the type cannot read (`GET`'s nil into a `String`, `HGETALL`'s array
//! into an `i64`, a Lua float cut to an integer into an `f64`) is a compile error, not a
//! failure on the one path that hits it.
//!
//! - [`Shapes`]: the shapes a reply may have (nil, integer, integer from a truncated
//!   number, bulk string, status, array of shapes, error, unknown), as the client reads it
//!   under RESP2.
//! - The commands' replies come from the generated table
//!   ([`crate::commands::reply`]), read from the servers' own reply schemas.
//! - [`Return`]: each `return` of a script with its shapes, inferred on every path
//!   ([`crate::lua::Analysis::returns`]); what the walk cannot follow is unknown.
//! - [`Declared`]: what a Rust type accepts, by redis-rs's `FromRedisValue` rules.
//!
//! Choices where the rules are silent: an error reply is never a mismatch (the caller
//! gets it as an `Err`, whatever the type); unknown is never a mismatch; a string whose
//! text is not known may be a number (redis-rs parses text into the integer types), so
//! only a literal text that is not a number is refused by them; indexing a table
//! (`t[1]`), `ARGV`, `cjson.decode`, a global and a computed command are unknown;
//! `tonumber(x)` is a truncated number (or unknown, as it may be nil).
//!
//! After `redis.setresp(3)` on a path, a command's reply there is its RESP3 form as Lua
//! holds it ([`Protocol`]), and `false` replies 0 (to a RESP2 caller; RESP3's false to a
//! RESP3 one); where a path may or may not have switched (a condition, a function that
//! switches, `redis.setresp(ARGV[1])`), a reply may be either form.
//!
//! ```
//! # #[cfg(feature = "analysis")] {
//! use lockscript_audit::lua::analyze;
//! use lockscript_audit::reply::Declared;
//!
//! let analysis = analyze("return redis.call('GET', KEYS[1])");
//! let get = &analysis.returns[0];
//! assert_eq!(get.shapes.to_string(), "nil | bulk string");
//! let refusal = Declared::Text.refusal("String", &get.shapes).unwrap();
//! assert_eq!(refusal.fix, "declare `Option<String>`");
//! # }
//! ```

mod declared;
#[cfg(feature = "analysis")]
mod infer;
mod protocol;
mod shape;

pub use declared::{Declared, Refusal};
#[cfg(feature = "analysis")]
pub use infer::Return;
#[cfg(feature = "analysis")]
pub(crate) use infer::returns;
pub use protocol::Protocol;
pub use shape::{Shape, Shapes};
