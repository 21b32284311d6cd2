use lockscript::lock_script;

#[lock_script("scripts/get.lua", digest = "abc")]
fn typo(#[key] key: &str) -> Option<String>;

fn main() {}
