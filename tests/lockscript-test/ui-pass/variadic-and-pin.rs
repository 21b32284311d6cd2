// A slice of keys is variadic; the pin matches the reviewed file.
use lockscript::{Arity, lock_script};

#[lock_script("scripts/del-all.lua", sha1 = "f64f09564e5ddb1232da89905c1efaf756914c19")]
pub fn del_all(#[key] keys: &[&str]) -> i64;

fn main() {
    let call = del_all(&["a", "b", "c"]);
    assert_eq!(call.script().keys(), Arity::AtLeast(0));
    assert_eq!(call.script().args(), Arity::Exactly(0));
    assert_eq!(format!("{call:?}").contains("arguments: 3"), true);
}
