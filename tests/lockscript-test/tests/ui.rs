//! Compile-fail (and a few compile-pass) tests of `#[lock_script]` and
//! `#[lockscript_test::test]`, with `.stderr`
//! snapshots. Regenerate snapshots with `TRYBUILD=overwrite`.

use std::path::{Path, PathBuf};

/// trybuild compiles each case as a crate in `<target>/tests/trybuild/<this crate>`, and
/// `#[lock_script]` resolves paths against that crate's manifest dir; so the case scripts
/// (and fixtures) are copied there first, and a case writes `scripts/x.lua` as a user would.
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
    let ui = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ui");
    copy_dir(&ui.join("scripts"), &project.join("scripts"));
    // The fixture files of `#[lockscript_test::test]`'s cases, read the same way.
    copy_dir(&ui.join("fixtures"), &project.join("fixtures"));
}

/// Copies `from` into `to` with its subdirectories (the included files of the cases).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create trybuild scripts dir");
    for entry in std::fs::read_dir(from).expect("ui/scripts") {
        let path = entry.expect("dir entry").path();
        let target = to.join(path.file_name().expect("file name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, target).expect("copy case script");
        }
    }
}

/// (`./run tests` runs it once: it needs no server, so the server matrix skips it by name.)
#[test]
fn compile_fail_and_pass_cases_match_their_snapshots() {
    stage_scripts();
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
    cases.pass("ui-pass/*.rs");
}
