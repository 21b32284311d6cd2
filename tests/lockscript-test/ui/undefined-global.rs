// Reading a global that neither the script, its includes nor Redis's Lua define fails
// when the script runs: an error at the use, with "did you mean" for a near local.
use lockscript::lock_script;

#[lock_script("scripts/undefined-global.lua")]
fn get(#[key] key: &str) -> i64;

fn main() {
    let _ = get("k");
}
