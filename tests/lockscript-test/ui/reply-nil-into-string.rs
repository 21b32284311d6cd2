// GET of a missing key replies nil, which a `String` cannot hold.
use lockscript::lock_script;

#[lock_script("scripts/reply-get.lua")]
fn get(#[key] key: &str) -> String;

fn main() {}
