// `return false` reaches the caller as nil.
use lockscript::lock_script;

#[lock_script("scripts/reply-false.lua")]
fn field(#[key] hash: &str, name: &str) -> String;

fn main() {}
