// There never was a Valkey 7.0: Valkey began at 7.2.
use lockscript::lock_script;

#[lock_script("scripts/get.lua", requires = "redis 6.2, valkey 7.0")]
fn get(#[key] key: &str) -> Option<String>;

fn main() {
    let _ = get("k");
}
