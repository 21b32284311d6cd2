//! A script is its bytes: a script file that is not UTF-8 runs as Redis runs it, and every
//! delivery sends exactly the bytes the digest is of (`EVALSHA` with the digest of those
//! bytes, `SCRIPT LOAD` and `EVAL` with the bytes, the Functions library holding them, a
//! pipeline's first `EVAL`). Checked on the Latin-1 fixture and on scripts generated from
//! a seed (bytes that are not UTF-8, CRLF line ends, a BOM, a shebang with flags, long
//! ones), by what the server says it holds (`SCRIPT EXISTS`, `FUNCTION LIST WITHCODE`)
//! and by the script's reply.

use lockscript::{Arity, Delivery, Invocation, PipelineExt, Script, lock_script};
use lockscript_audit::functions::{Source, library, split};
use lockscript_test::server::RedisServer;
use lockscript_test::{command_calls, flush_scripts_and_reset_stats, has_functions};

/// Stores `caf\xe9` (Latin-1) under the key.
#[lock_script("lua/latin1.lua")]
fn store_latin1(#[key] key: &str) -> String;

fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

fn script_exists(conn: &mut redis::Connection, sha1: &str) -> bool {
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha1)
        .query(conn)
        .unwrap();
    exists == [true]
}

/// The code of library `name` on the server, byte for byte.
fn library_code(conn: &mut redis::Connection, name: &str) -> Option<Vec<u8>> {
    let libraries: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(name)
        .arg("WITHCODE")
        .query(conn)
        .unwrap();
    libraries.into_iter().find_map(|lib| {
        let found: String = redis::from_redis_value_ref(lib.get("library_name")?).ok()?;
        if found != name {
            return None;
        }
        redis::from_redis_value_ref(lib.get("library_code")?).ok()
    })
}

#[test]
fn a_latin1_script_is_sent_byte_for_byte_and_runs() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let call = store_latin1("k");
    let script = call.script();
    assert!(script.bytes().ends_with(b"'caf\xe9')\n"));
    assert_eq!(script.sha1(), sha1_hex(script.bytes()));
    assert_eq!(call.invoke(&mut conn).unwrap(), "OK");
    let stored: Vec<u8> = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(stored, b"caf\xe9");
    // The server cached it under the digest computed over the bytes.
    assert!(script_exists(&mut conn, script.sha1()));
}

/// By Functions the Latin-1 script is its own function, whose body is the file's bytes:
/// the call is an `FCALL` (not a silent `EVALSHA`), and the server's library is the
/// runtime's, byte for byte.
#[test]
fn by_functions_a_latin1_script_runs_from_its_bytes() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    if !has_functions(&mut conn) {
        eprintln!("skipped: the server has no Redis Functions (before 7.0)");
        return;
    }
    let call = store_latin1("k");
    let script = call.script();
    let library = lockscript::functions_library();
    let function = library
        .function(script.sha1())
        .expect("the script has a function under its digest");
    flush_scripts_and_reset_stats(&mut conn);
    assert_eq!(
        call.delivery(Delivery::Functions)
            .invoke(&mut conn)
            .unwrap(),
        "OK"
    );
    assert_eq!(command_calls(&mut conn, "fcall"), 2, "missed, then ran");
    assert_eq!(command_calls(&mut conn, "evalsha"), 0);
    let stored: Vec<u8> = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(stored, b"caf\xe9");
    let code = library_code(&mut conn, &library.name).expect("the library was loaded");
    assert_eq!(code, library.code);
    let found = split(&code);
    let body = found
        .iter()
        .find(|f| f.function == function.function)
        .expect("the function is in the server's library");
    assert_eq!(body.source, script.bytes());
}

/// In a pipeline the Latin-1 script goes once as `EVAL` with its bytes, then by its
/// digest, which the `EVAL` cached.
#[test]
fn a_pipeline_sends_a_latin1_script_once_then_by_digest() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    flush_scripts_and_reset_stats(&mut conn);
    let mut pipe = redis::pipe();
    pipe.invoke(&store_latin1("a"))
        .unwrap()
        .invoke(&store_latin1("b"))
        .unwrap();
    let (a, b): (String, String) = pipe.query(&mut conn).unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("OK", "OK"));
    assert_eq!(command_calls(&mut conn, "eval"), 1);
    assert_eq!(command_calls(&mut conn, "evalsha"), 1);
    assert!(script_exists(&mut conn, store_latin1("a").script().sha1()));
}

/// A small deterministic generator (SplitMix64), so that a seed names a case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Bytes of every kind: ASCII, bytes that are not UTF-8, a BOM, NUL, CR and LF.
    fn bytes(&mut self, max: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..self.below(max + 1) {
            match self.below(6) {
                0 => out.extend_from_slice(b"\xef\xbb\xbf"),
                1 => out.push(0x80 + u8::try_from(self.below(0x80)).unwrap()),
                2 => out.push(u8::try_from(self.below(0x20)).unwrap()),
                3 => out.extend_from_slice("é€".as_bytes()),
                _ => out.push(0x20 + u8::try_from(self.below(0x5f)).unwrap()),
            }
        }
        out
    }
}

/// A generated script, what its reply must be, and its flags.
struct Generated {
    bytes: Vec<u8>,
    payload: Vec<u8>,
    flags: Vec<&'static str>,
}

/// A script from `seed`: an optional shebang with flags (with `shebang`: servers before
/// 7.0 cannot parse one), comment lines of raw bytes (neither UTF-8 nor free of a BOM),
/// CRLF or LF line ends, sometimes tens of KB of padding, and a string of raw bytes it
/// answers with its argument and its key count.
fn generate(seed: u64, shebang: bool) -> Generated {
    let mut rng = Rng(seed);
    let mut bytes = Vec::new();
    let shebangs: [(&str, &[&str]); 5] = [
        ("", &[]),
        ("#!lua\n", &[]),
        ("#!lua flags=no-writes\n", &["no-writes"]),
        (
            "#!lua flags=no-writes,allow-stale\n",
            &["no-writes", "allow-stale"],
        ),
        ("#!lua flags=allow-oom\n", &["allow-oom"]),
    ];
    let pick = rng.below(5);
    let (line, flags) = shebangs[if shebang {
        usize::try_from(pick).unwrap()
    } else {
        0
    }];
    bytes.extend_from_slice(line.as_bytes());
    let eol = |rng: &mut Rng, bytes: &mut Vec<u8>| {
        bytes.extend_from_slice(if rng.chance(50) { b"\r\n" } else { b"\n" });
    };
    if rng.chance(30) {
        // A BOM at the start of a line, as an editor writes it at the start of a file.
        bytes.extend_from_slice(b"-- \xef\xbb\xbfgenerated");
        eol(&mut rng, &mut bytes);
    }
    let lines = if rng.chance(15) { 2_000 } else { rng.below(4) };
    for _ in 0..lines {
        bytes.extend_from_slice(b"-- ");
        let comment: Vec<u8> = rng
            .bytes(60)
            .into_iter()
            .filter(|b| *b != b'\n' && *b != b'\r')
            .collect();
        bytes.extend_from_slice(&comment);
        eol(&mut rng, &mut bytes);
    }
    let payload = rng.bytes(120);
    bytes.extend_from_slice(b"local s = '");
    for &b in &payload {
        match b {
            // What a short string cannot hold raw: as a three-digit decimal escape.
            b'\\' | b'\'' | b'\n' | b'\r' => {
                bytes.extend_from_slice(format!("\\{b:03}").as_bytes());
            }
            _ => bytes.push(b),
        }
    }
    bytes.push(b'\'');
    eol(&mut rng, &mut bytes);
    bytes.extend_from_slice(b"return {s, ARGV[1], tostring(#KEYS)}");
    if rng.chance(50) {
        eol(&mut rng, &mut bytes);
    }
    Generated {
        bytes,
        payload,
        flags: flags.to_vec(),
    }
}

/// A script built at run time, as the macro builds one: its text for reading, its bytes
/// for sending, and the digest of the bytes.
fn script_of(generated: &Generated) -> &'static Script {
    let bytes: &'static [u8] = Box::leak(generated.bytes.clone().into_boxed_slice());
    let text: &'static str =
        Box::leak(String::from_utf8_lossy(bytes).into_owned().into_boxed_str());
    let sha1: &'static str = Box::leak(sha1_hex(bytes).into_boxed_str());
    let flags: &'static [&'static str] = Box::leak(generated.flags.clone().into_boxed_slice());
    Box::leak(Box::new(
        Script::__new(
            "generated",
            "generated.lua",
            text,
            sha1,
            Arity::Exactly(1),
            Arity::Exactly(1),
            flags.contains(&"no-writes"),
            flags,
        )
        .__with_bytes(bytes),
    ))
}

fn call(script: &'static Script, arg: &str) -> Invocation<Vec<Vec<u8>>> {
    let mut call = Invocation::__new(script, 1);
    call.__one("key", &"k");
    call.__one("arg", &arg);
    call
}

/// The reply every delivery must give: the payload as the server decoded it from the
/// script's bytes, the argument, one key.
fn expected(generated: &Generated, arg: &str) -> Vec<Vec<u8>> {
    vec![
        generated.payload.clone(),
        arg.as_bytes().to_vec(),
        b"1".to_vec(),
    ]
}

/// Functions: the library of the generated script holds its bytes, the server keeps them
/// byte for byte, and its function answers as the script does.
fn by_functions(conn: &mut redis::Connection, generated: &Generated, valkey: bool, case: &str) {
    let sha1 = sha1_hex(&generated.bytes);
    let lib = library(&[Source {
        name: "generated",
        source: &generated.bytes,
    }]);
    let () = redis::cmd("FUNCTION").arg("FLUSH").query(conn).unwrap();
    let loaded: redis::RedisResult<String> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&lib.code)
        .query(conn);
    if valkey && generated.bytes.contains(&0) {
        // Valkey (9.1) compiles a library only up to its first NUL byte: the function's
        // end is cut off, so the load is refused, never a shorter script loaded in its
        // place. By scripts it runs.
        let err = loaded.unwrap_err();
        assert!(
            err.to_string().contains("Error compiling function"),
            "{case}: {err}"
        );
        return;
    }
    let name = loaded.unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(name, lib.name, "{case}");
    let code = library_code(conn, &lib.name).unwrap();
    assert_eq!(code, lib.code, "{case}");
    let found = split(&code);
    assert_eq!(found.len(), 1, "{case}");
    assert_eq!(found[0].source, generated.bytes, "{case}");
    let function = lib.function(&sha1).expect("the function of the digest");
    assert_eq!(function.function, found[0].function, "{case}");
    let read_only = generated.flags.contains(&"no-writes");
    let reply: Vec<Vec<u8>> = redis::cmd(if read_only { "FCALL_RO" } else { "FCALL" })
        .arg(&function.function)
        .arg(1)
        .arg("k")
        .arg("fcall")
        .query(conn)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(reply, expected(generated, "fcall"), "{case}");
}

/// For scripts generated from a seed, every delivery sends exactly the script's bytes:
/// the digest used is the SHA1 of the bytes, the server holds that digest after a load
/// and after an `EVAL`, its Functions library holds the bytes, and the reply holds the
/// raw bytes the script carries. Set `LOCKSCRIPT_BYTES_SEED` to run from a given seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_delivery_sends_exactly_the_scripts_bytes() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let functions = has_functions(&mut conn);
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    let valkey = info.contains("valkey_version:");
    // A user who may not SCRIPT LOAD (nor any SCRIPT subcommand: Redis 6.2 takes no
    // `-script|load`), so that a cold call falls back to EVAL.
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("noload")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-script")
        .query(&mut conn)
        .unwrap();
    let mut noload = redis::Client::open(format!("redis://noload:pw@127.0.0.1:{}/", server.port()))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut multiplexed = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let base = std::env::var("LOCKSCRIPT_BYTES_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let mut seed = [0; 8];
            getrandom::fill(&mut seed).unwrap();
            u64::from_le_bytes(seed)
        });
    for seed in base..base + 40 {
        // Servers with Functions (7.0+) are those that parse a shebang.
        let generated = generate(seed, functions);
        let script = script_of(&generated);
        let sha1 = sha1_hex(&generated.bytes);
        let case = format!(
            "seed {seed} (LOCKSCRIPT_BYTES_SEED={seed}): {:?}",
            script.source()
        );
        assert_eq!(script.sha1(), sha1, "{case}");
        assert_eq!(script.bytes(), generated.bytes, "{case}");

        // EVALSHA on a cold cache: SCRIPT LOAD of the bytes (its digest checked against
        // the one used), then EVALSHA.
        let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
        let reply = call(script, "sync").invoke(&mut conn);
        assert_eq!(reply.unwrap(), expected(&generated, "sync"), "{case}");
        assert!(script_exists(&mut conn, &sha1), "{case}");

        // The async path: SCRIPT LOAD and EVALSHA in one round trip.
        let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
        let reply = call(script, "async").invoke_async(&mut multiplexed).await;
        assert_eq!(reply.unwrap(), expected(&generated, "async"), "{case}");
        assert!(script_exists(&mut conn, &sha1), "{case}");

        // EVAL as the last resort (the load refused): the server caches what it ran
        // under the digest of the bytes sent.
        let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
        let reply = call(script, "eval").invoke(&mut noload);
        assert_eq!(reply.unwrap(), expected(&generated, "eval"), "{case}");
        assert!(script_exists(&mut conn, &sha1), "{case}");

        // A pipeline: EVAL with the bytes, then EVALSHA, which finds what the EVAL cached.
        let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
        let (first, second) = (call(script, "one"), call(script, "two"));
        let mut pipe = redis::pipe();
        pipe.invoke(&first).unwrap().invoke(&second).unwrap();
        let replies: Vec<redis::Value> = pipe.query(&mut conn).unwrap();
        let mut replies = replies.into_iter();
        let one = first.read(replies.next().unwrap());
        let two = second.read(replies.next().unwrap());
        assert_eq!(one.unwrap(), expected(&generated, "one"), "{case}");
        assert_eq!(two.unwrap(), expected(&generated, "two"), "{case}");
        assert!(script_exists(&mut conn, &sha1), "{case}");

        if functions {
            by_functions(&mut conn, &generated, valkey, &case);
        }
    }
}

/// `#[lockscript_test::test]` loads every script of its binary at set-up: this one as its
/// bytes, under their digest, so a script test in a binary that declares it starts with
/// it cached (before, the set-up loaded the replaced text and every such test panicked).
#[lockscript_test::test]
fn a_script_test_starts_with_the_latin1_script_loaded_as_its_bytes(
    redis: &lockscript_test::TestRedis,
    conn: &mut redis::Connection,
) {
    let call = store_latin1("k");
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(call.script().sha1())
        .query(conn)
        .unwrap();
    assert_eq!(exists, [true]);
    assert_eq!(call.invoke(conn).unwrap(), "OK");
    assert_eq!(redis.command_calls("evalsha"), 1);
    assert_eq!(redis.command_calls("eval"), 0);
    let stored: Vec<u8> = redis::cmd("GET").arg("k").query(conn).unwrap();
    assert_eq!(stored, b"caf\xe9");
}
