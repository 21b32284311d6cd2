// A problem inside an included file points at that file and its own line.
use lockscript::lock_script;

#[lock_script("scripts/include-bad-command.lua")]
fn get(#[key] key: &str) -> Option<String>;

fn main() {
    let _ = get("k");
}
