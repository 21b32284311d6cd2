use lockscript::lock_script;

// The script calls a misspelt command through `local rcall = redis.call`.
#[lock_script("scripts/alias-typo.lua")]
fn claim(#[key] wait: &str, #[key] active: &str, token: &str) -> Option<String>;

fn main() {}
