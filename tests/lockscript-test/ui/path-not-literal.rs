use lockscript::lock_script;

#[lock_script(scripts::get)]
fn unquoted(#[key] key: &str) -> Option<String>;

fn main() {}
