//! `lockscript functions` writes the library as bytes: a script file that is not UTF-8
//! is in it byte for byte, as the runtime's library of the same script holds it.

use std::path::PathBuf;
use std::process::Command;

use lockscript_audit::functions::{Source, library, split};

#[test]
fn the_library_of_a_file_that_is_not_utf8_holds_its_bytes() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO_BIN_EXE_lockscript"))
        .args(["functions", "tests/lua/latin1.lua"])
        .current_dir(&workspace)
        .output()
        .expect("run lockscript");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(workspace.join("tests/lua/latin1.lua")).unwrap();
    assert!(
        std::str::from_utf8(&bytes).is_err(),
        "the fixture is Latin-1"
    );
    let expected = library(&[Source {
        name: "latin1",
        source: &bytes,
    }]);
    assert_eq!(out.stdout, expected.code);
    let found = split(&out.stdout);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].source, bytes);
    assert!(
        found[0]
            .function
            .ends_with(&lockscript_audit::sha1_hex(&bytes))
    );
}
