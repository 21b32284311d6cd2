use lockscript::lock_script;

#[lock_script("scripts/does-not-exist.lua")]
fn missing(#[key] key: &str) -> i64;

fn main() {
    let _ = missing("k");
}
