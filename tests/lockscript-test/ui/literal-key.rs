use lockscript::lock_script;

// Keys written into the script, not passed in KEYS: a Cluster routes the call by KEYS
// alone. Each is an error at the literal, saying how to pass it.
#[lock_script("scripts/literal-key.lua")]
fn take(#[key] counter: &str, #[key] totals: &str) -> bool;

fn main() {}
