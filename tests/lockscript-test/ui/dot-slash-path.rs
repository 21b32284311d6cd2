// A path written with `./` names the file without it in errors (it is not resolved on
// disk, so a symlink in the path is shown as written).
use lockscript::lock_script;

#[lock_script("./scripts/sleep.lua")]
fn sleepy(#[key] key: &str, value: &str) -> i64;

fn main() {}
