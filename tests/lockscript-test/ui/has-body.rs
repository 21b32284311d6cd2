use lockscript::lock_script;

#[lock_script("scripts/get.lua")]
fn with_body(#[key] key: &str) -> Option<String> {
    todo!()
}

fn main() {}
