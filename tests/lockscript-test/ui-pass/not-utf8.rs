// Redis runs any bytes: a script file that is not UTF-8 is sent byte for byte (its digest
// is over those bytes) and checked as text with U+FFFD in place of what is not UTF-8.
use lockscript::lock_script;

#[lock_script("scripts/not-utf8.lua")]
fn binary() -> i64;

fn main() {
    let script = binary().script();
    assert_eq!(&script.bytes()[14..16], b"\xff\xfe");
    assert!(script.source().contains('\u{fffd}'));
    let digest = sha1_smol::Sha1::from(script.bytes()).digest().to_string();
    assert_eq!(script.sha1(), digest);
}
