//! The link-time registry, SCRIPT LOAD of everything, and `scripts/SHA1SUMS`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lockscript_test::server::RedisServer;

fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

fn scripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts")
}

#[test]
fn registry_lists_builtin_and_test_scripts_sorted() {
    // Touch a fixture so nothing could argue it was not linked.
    let _ = lockscript_test::fixtures::peek("k");
    let names: Vec<&str> = lockscript::scripts()
        .map(lockscript::Script::name)
        .collect();
    for expected in [
        "acquire-with-retry",
        "compare-del",
        "renew",
        "handover",
        "peek",
        "fail",
        "del-all",
        "put",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
}

#[test]
fn every_compiled_digest_is_the_sha1_of_its_embedded_source() {
    for script in lockscript::scripts() {
        assert_eq!(
            script.sha1(),
            sha1_hex(script.source().as_bytes()),
            "{}",
            script.name()
        );
        assert_eq!(script.sha1().len(), 40);
        assert!(
            script
                .sha1()
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }
}

#[test]
fn sha1sums_file_matches_every_script_file_and_the_compiled_digests() {
    let dir = scripts_dir();
    let sums = std::fs::read_to_string(dir.join("SHA1SUMS")).expect("scripts/SHA1SUMS");
    let listed: BTreeMap<String, String> = sums
        .lines()
        .map(|line| {
            let (digest, file) = line
                .split_once("  ")
                .expect("sha1sum format: <digest>  <file>");
            (file.to_owned(), digest.to_owned())
        })
        .collect();

    let mut on_disk = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "lua") {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let digest = sha1_hex(&std::fs::read(&path).unwrap());
            assert_eq!(
                listed.get(&file),
                Some(&digest),
                "SHA1SUMS is stale for {file}: run `cd scripts && sha1sum *.lua > SHA1SUMS`"
            );
            on_disk.push(file);
        }
    }
    on_disk.sort();
    assert_eq!(
        listed.keys().cloned().collect::<Vec<_>>(),
        on_disk,
        "SHA1SUMS lists exactly the .lua files"
    );

    for script in lockscript::scripts().filter(|s| s.path().starts_with("scripts/")) {
        let file = script.path().trim_start_matches("scripts/");
        assert_eq!(
            listed.get(file).map(String::as_str),
            Some(script.sha1()),
            "{file}"
        );
    }
}

fn all_cached(conn: &mut redis::Connection) -> Vec<bool> {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("EXISTS");
    for s in lockscript::scripts() {
        cmd.arg(s.sha1());
    }
    cmd.query(conn).unwrap()
}

#[test]
fn load_scripts_loads_every_registered_script() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    assert!(all_cached(&mut conn).iter().all(|c| !c));
    let loaded = lockscript::load_scripts(&mut conn).unwrap();
    assert_eq!(loaded, lockscript::scripts().len());
    assert!(all_cached(&mut conn).iter().all(|c| *c));
}

#[tokio::test]
async fn load_scripts_async_loads_every_registered_script() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let loaded = lockscript::load_scripts_async(&mut conn).await.unwrap();
    assert_eq!(loaded, lockscript::scripts().len());
    let mut check = server.connection();
    assert!(all_cached(&mut check).iter().all(|c| *c));
}
