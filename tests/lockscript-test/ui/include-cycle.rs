// Two files that include each other are a cycle, reported at the include that closes it.
use lockscript::lock_script;

#[lock_script("scripts/include-cycle.lua")]
fn get(#[key] key: &str) -> Option<String>;

fn main() {
    let _ = get("k");
}
