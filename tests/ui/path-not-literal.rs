use lock_runtime::lock_script;

#[lock_script(scripts::get)]
fn unquoted(#[key] key: &str) -> Option<String>;

fn main() {}
