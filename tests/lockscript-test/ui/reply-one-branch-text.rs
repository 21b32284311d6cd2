// One path replies INCR's integer, the other a text that is not a number.
use lockscript::lock_script;

#[lock_script("scripts/reply-incr-or-missing.lua")]
fn bump(#[key] counter: &str) -> i64;

fn main() {}
