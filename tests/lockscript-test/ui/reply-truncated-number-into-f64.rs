// A Lua number reaches the caller as an integer: `f64` would get 2.0 for 5 / 2.
use lockscript::lock_script;

#[lock_script("scripts/reply-half.lua")]
fn half(n: f64) -> f64;

fn main() {}
