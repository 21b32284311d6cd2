use lockscript::lock_script;

// Every problem shows in one build: the unknown command, the write in a read-only
// script, and the ARGV count.
#[lock_script("scripts/several.lua")]
fn broken(#[key] key: &str) -> i64;

fn main() {}
