use lockscript::lock_script;

// The file changed since this digest was reviewed.
#[lock_script("scripts/get-eq.lua", sha1 = "0000000000000000000000000000000000000000")]
fn pinned(#[key] key: &str, token: &str) -> bool;

fn main() {}
