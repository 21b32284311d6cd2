use lockscript::lock_script;

// The script calls a misspelt command through `local rcall = redis.call`.
#[lock_script("scripts/alias-typo.lua")]
fn peek(#[key] key: &str) -> Option<String>;

fn main() {}
