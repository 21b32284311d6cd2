use lockscript::lock_script;

#[lock_script("scripts/get.lua")]
async fn asynchronous(#[key] key: &str) -> Option<String>;

fn main() {}
