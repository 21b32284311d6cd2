use lockscript::lock_script;

#[lock_script("scripts/sleep.lua")]
fn sleepy(#[key] key: &str, value: &str) -> i64;

fn main() {}
