// HGETALL replies an array, which no integer can hold.
use lockscript::lock_script;

#[lock_script("scripts/reply-hgetall.lua")]
fn fields(#[key] hash: &str) -> i64;

fn main() {}
