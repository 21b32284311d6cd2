use lockscript::lock_script;

// The script reads KEYS[1] only; the function declares two keys.
#[lock_script("scripts/get-eq.lua")]
fn too_many_keys(#[key] a: &str, #[key] b: &str, token: &str) -> bool;

fn main() {}
