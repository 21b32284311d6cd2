//! Scripts declared only for the tests, under `tests/lua/`.

use lockscript::lock_script;

/// Reads a key; `#!lua flags=no-writes`, so it goes as EVALSHA_RO / EVAL_RO.
#[lock_script("lua/peek.lua")]
pub fn peek(#[key] key: &str) -> Option<String>;

/// Fails on purpose: `mode = "reply"` returns `redis.error_reply`, anything else INCRs.
#[lock_script("lua/fail.lua")]
pub fn fail(#[key] key: &str, mode: &str) -> i64;

/// Deletes every key given: a variadic `#[key]` slice.
#[lock_script("lua/del-all.lua")]
pub fn del_all(#[key] keys: &[&str]) -> i64;

/// SETs any value, to test how argument shapes are checked.
#[lock_script("lua/put.lua")]
pub fn put<V: redis::ToRedisArgs>(#[key] key: &str, value: V) -> String;

/// Adds `by` to a counter and returns the new value: shows each run exactly once.
#[lock_script("lua/bump.lua")]
pub fn bump(#[key] counter: &str, by: i64) -> i64;
