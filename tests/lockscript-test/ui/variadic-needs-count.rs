use lockscript::lock_script;

// A slice of keys needs a script that reads KEYS by count.
#[lock_script("scripts/get.lua")]
fn fixed_script(#[key] keys: &[&str]) -> Option<String>;

fn main() {}
