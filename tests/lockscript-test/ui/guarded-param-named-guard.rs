use lockscript::lock_script;

// A guarded function takes the guard first, as `guard`: the name is taken.
#[lock_script("scripts/get.lua", guarded)]
fn peek(#[key] guard: &str) -> Option<String>;

fn main() {}
