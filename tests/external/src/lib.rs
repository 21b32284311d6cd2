//! The script this app declares, in a library so its tests can call it too.
#![forbid(unsafe_code)]

use lockscript::lock_script;

/// Adds `by` to the counter and returns the new value.
#[lock_script("lua/bump.lua")]
pub fn bump(#[key] counter: &str, by: i64) -> i64;
