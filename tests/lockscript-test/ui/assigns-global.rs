// Redis refuses a script that creates a global, by assignment or `function name()`.
use lockscript::lock_script;

#[lock_script("scripts/assigns-global.lua")]
fn set(#[key] key: &str) -> String;

fn main() {
    let _ = set("k");
}
