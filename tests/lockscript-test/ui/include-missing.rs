// An include that names no file is an error at the include line.
use lockscript::lock_script;

#[lock_script("scripts/include-missing.lua")]
fn get(#[key] key: &str) -> Option<String>;

fn main() {
    let _ = get("k");
}
