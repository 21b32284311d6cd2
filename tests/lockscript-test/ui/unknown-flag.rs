use lockscript::lock_script;

#[lock_script("scripts/unknown-flag.lua")]
fn flagged(#[key] key: &str) -> Option<String>;

fn main() {}
