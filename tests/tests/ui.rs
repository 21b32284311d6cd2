//! Compile-fail (and a few compile-pass) tests of `#[lock_script]`, with `.stderr`
//! snapshots. Regenerate snapshots with `TRYBUILD=overwrite`.

use std::path::{Path, PathBuf};

/// trybuild compiles each case as a crate in `<target>/tests/trybuild/<this crate>`, and
/// `#[lock_script]` resolves paths against that crate's manifest dir; so the case scripts
/// are copied there first, and a case writes `scripts/x.lua` as a user would.
fn stage_scripts() {
    let exe = std::env::current_exe().expect("test binary path");
    // <target>/<profile>/deps/ui-<hash>
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .expect("target dir");
    let project = target
        .join("tests")
        .join("trybuild")
        .join(env!("CARGO_PKG_NAME"));
    let scripts = project.join("scripts");
    std::fs::create_dir_all(&scripts).expect("create trybuild scripts dir");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ui/scripts");
    for entry in std::fs::read_dir(&source).expect("ui/scripts") {
        let path = entry.expect("dir entry").path();
        std::fs::copy(&path, scripts.join(path.file_name().expect("file name")))
            .expect("copy case script");
    }
}

#[test]
fn ui() {
    stage_scripts();
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
    cases.pass("ui-pass/*.rs");
}
