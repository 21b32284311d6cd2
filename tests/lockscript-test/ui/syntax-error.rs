use lockscript::lock_script;

#[lock_script("scripts/bad-syntax.lua")]
fn unfinished(#[key] key: &str, token: &str) -> i64;

fn main() {}
