use lockscript::lock_script;

#[lock_script("scripts/writes-in-ro.lua")]
fn not_read_only(#[key] key: &str, value: &str) -> String;

fn main() {}
