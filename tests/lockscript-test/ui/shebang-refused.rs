// Shebangs Redis and Valkey refuse: an empty flag after a trailing comma ("Unexpected
// flag in script shebang: "), and a file that is only a shebang with no newline after it
// ("Invalid script shebang").
use lockscript::lock_script;

#[lock_script("scripts/empty-flag.lua")]
fn get(#[key] key: &str) -> Option<String>;

#[lock_script("scripts/only-shebang.lua")]
fn nothing();

fn main() {
    let _ = get("k");
    let _ = nothing();
}
