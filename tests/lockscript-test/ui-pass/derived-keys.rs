// Keys built from KEYS (`KEYS[1] .. id`) are computed, not literal keys: the script
// builds; a literal that is not at a key position (PUBLISH's channel) is no key either.
use lockscript::lock_script;

#[lock_script("scripts/derived-keys.lua")]
fn activate(#[key] prefix: &str, #[key] active: &str, id: &str) -> String;

fn main() {
    let script = activate("bull:q:", "bull:q:active", "1").script();
    assert_eq!(script.keys(), lockscript::Arity::Exactly(2));
}
