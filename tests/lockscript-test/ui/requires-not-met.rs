// A script that needs a newer server than `requires` declares is an error naming the
// command, where it is, and both versions.
use lockscript::lock_script;

#[lock_script("scripts/lmpop.lua", requires = "redis 6.2, valkey 8.0")]
fn pop(#[key] list: &str) -> Option<(String, Vec<String>)>;

fn main() {
    let _ = pop("l");
}
