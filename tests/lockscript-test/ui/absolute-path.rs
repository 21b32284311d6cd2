use lockscript::lock_script;

#[lock_script("/etc/scripts/get.lua")]
fn absolute(#[key] key: &str) -> i64;

fn main() {}
