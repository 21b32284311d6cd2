use lockscript::lock_script;

#[lock_script("scripts/multi.lua")]
fn transaction(#[key] key: &str) -> Option<String>;

fn main() {}
