//! The generated crate: each case as a module with its declaration and a call of it, its
//! script files written byte for byte, the driver as `main.rs`; built with cargo against
//! this workspace's `lockscript`, in this workspace's target directory (so nothing
//! already built is built again) and offline.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::model::{Case, Elem, Shape, Ty, Val, hex};

/// The driver, the generated crate's `main.rs`.
const DRIVER: &str = include_str!("driver.rs");

/// The generated crate's package name (and binary's) starts so; a digest of its files
/// follows, so that two runs never replace each other's binary in the shared target
/// directory unless they would build the same one.
const PACKAGE: &str = "lockscript-edges";

/// A built crate.
pub struct Built {
    pub dir: PathBuf,
    pub binary: PathBuf,
    /// The cases that did not compile, with the compiler's errors for their module.
    pub compile_errors: BTreeMap<usize, String>,
    pub seconds: f64,
    /// The temporary folder, removed on drop (`None` when kept).
    _temp: Option<tempfile::TempDir>,
}

/// Writes and builds the crate for `cases`; a case whose module does not compile is
/// left out and the rest built again.
pub fn build(cases: &[Case], seed: u64, keep: bool) -> Built {
    let temp = tempfile::Builder::new()
        .prefix(&format!("lockscript-edges-{seed}-"))
        .tempdir()
        .expect("a temporary folder");
    let dir = temp.path().to_path_buf();
    let package = write_crate(&dir, cases, seed);

    let (target, profile) = target_dir();
    let started = Instant::now();
    let mut compile_errors = BTreeMap::new();
    let mut included: Vec<&Case> = cases.iter().collect();
    loop {
        write(&dir.join("src/cases.rs"), registry(&included).as_bytes());
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo
            .args(["build", "--offline", "--message-format=short"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", &target);
        if profile == "release" {
            cargo.arg("--release");
        }
        // What cargo set for this test binary is not the generated crate's.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_BIN_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "OUT_DIR",
                ]
                .contains(&name.as_ref())
            {
                cargo.env_remove(name.as_ref());
            }
        }
        let output = cargo.output().expect("run cargo build");
        if output.status.success() {
            break;
        }
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let mut failed: BTreeMap<usize, String> = BTreeMap::new();
        for line in stderr.lines() {
            if let Some(index) = case_of(line)
                && line.contains(": error")
            {
                let errors = failed.entry(index).or_default();
                let _ = writeln!(errors, "{line}");
            }
        }
        assert!(
            !failed.is_empty(),
            "the generated crate at {} did not build, and no error names a case:\n{stderr}",
            dir.display()
        );
        included.retain(|case| !failed.contains_key(&case.index));
        compile_errors.extend(failed);
    }
    let seconds = started.elapsed().as_secs_f64();
    let binary = target.join(profile).join(&package);
    let temp = if keep {
        let _ = temp.keep();
        None
    } else {
        Some(temp)
    };
    Built {
        dir,
        binary,
        compile_errors,
        seconds,
        _temp: temp,
    }
}

/// Writes the crate's files into `dir`; returns its package name.
fn write_crate(dir: &Path, cases: &[Case], seed: u64) -> String {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf();
    let mut files: Vec<(PathBuf, Vec<u8>)> = vec![(PathBuf::from("src/main.rs"), DRIVER.into())];
    for case in cases {
        for file in &case.script.files {
            files.push((Path::new("scripts").join(&file.path), file.bytes()));
        }
        let (expanded, _) = case.script.expanded();
        files.push((format!("scripts/c{}.expected", case.index).into(), expanded));
        files.push((
            format!("src/c{}.rs", case.index).into(),
            module(case, seed).into_bytes(),
        ));
    }
    let mut digest = sha1_smol::Sha1::new();
    for (path, bytes) in &files {
        digest.update(path.to_string_lossy().as_bytes());
        digest.update(&[0]);
        digest.update(bytes);
        digest.update(&[0]);
        write(&dir.join(path), bytes);
    }
    let package = format!("{PACKAGE}-{}", &digest.digest().to_string()[..12]);
    write(
        &dir.join("Cargo.toml"),
        manifest(&workspace, &package).as_bytes(),
    );
    std::fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");

    package
}

/// The case a compiler message is about: `src/c7.rs:4:15: error...` is case 7.
fn case_of(line: &str) -> Option<usize> {
    let rest = line.strip_prefix("src/c")?;
    let (digits, rest) = rest.split_once('.')?;
    rest.starts_with("rs:").then(|| digits.parse().ok())?
}

fn write(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create a folder");
    }
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// This test binary's target directory and profile folder (`<target>/debug/deps/edges-*`).
fn target_dir() -> (PathBuf, String) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary is in <target>/<profile>/deps");
    let profile = profile_dir
        .file_name()
        .map_or_else(|| "debug".into(), |n| n.to_string_lossy().into_owned());
    let target = profile_dir.parent().expect("a target folder").to_path_buf();
    (target, profile)
}

/// The same dependencies, with the same features, as lockscript-harness's, so that cargo
/// finds every one of them built.
fn manifest(workspace: &Path, package: &str) -> String {
    format!(
        r#"[package]
name = "{package}"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
lockscript = {{ path = "{runtime}", features = ["blocking", "cluster", "redlock", "tls", "metrics"] }}
redis = {{ version = "1.8", default-features = false, features = ["aio", "tokio-comp", "connection-manager", "cluster", "cluster-async", "bb8", "tokio-rustls-comp"] }}
tokio = {{ version = "1.40", default-features = false, features = ["rt", "rt-multi-thread", "macros", "time", "sync"] }}

# Not a member of the lockscript workspace above it, whatever the folder.
[workspace]
"#,
        runtime = workspace.join("lock-runtime").display()
    )
}

/// `src/cases.rs`: the modules of the cases that compile, and the driver's table.
fn registry(cases: &[&Case]) -> String {
    let mut out = String::from("// Generated by tests/tests/edges.rs.\n\n");
    for case in cases {
        let _ = writeln!(out, "#[path = \"c{0}.rs\"]\nmod c{0};", case.index);
    }
    out.push_str("\npub const ALL: &[crate::Case] = &[\n");
    for case in cases {
        let _ = writeln!(
            out,
            "    crate::Case {{ index: {i}, call: c{i}::__edges_call, sha1: \"{sha1}\", bytes: include_bytes!(\"../scripts/c{i}.expected\") }},",
            i = case.index,
            sha1 = case.sha1(),
        );
    }
    out.push_str("];\n");
    out
}

/// The case's module: its declaration and a call of it with its values.
pub fn module(case: &Case, seed: u64) -> String {
    let mut out = format!(
        "//! Case {} of seed {seed} (tests/tests/edges.rs).\n\n{}\n",
        case.index,
        declaration(case)
    );
    let args: Vec<String> = case.params.iter().map(argument).collect();
    let _ = write!(
        out,
        "\npub(super) fn __edges_call() -> ::lockscript::Invocation<::redis::Value> {{\n    {}({})\n}}\n",
        case.func,
        args.join(", ")
    );
    out
}

/// The declaration as the case writes it.
pub fn declaration(case: &Case) -> String {
    let lt = if case.lifetime { "'a " } else { "" };
    let mut generics = Vec::new();
    if case.lifetime {
        generics.push("'a".to_owned());
    }
    let mut params = Vec::new();
    for p in &case.params {
        let ty = match p.ty {
            Ty::Plain(elem, shape) => {
                let elem_ty = elem_type(elem, lt);
                match shape {
                    Shape::One => elem_ty,
                    Shape::Slice => format!("&{lt}[{elem_ty}]"),
                    Shape::Vec => format!("Vec<{elem_ty}>"),
                    Shape::Array => format!("&{lt}[{elem_ty}; {}]", p.values.len()),
                }
            }
            Ty::Generic => {
                let name = format!("T{}", generics.len());
                generics.push(format!("{name}: redis::ToRedisArgs"));
                name
            }
            Ty::Impl => "impl redis::ToRedisArgs".to_owned(),
        };
        params.push(format!(
            "{}{}{}: {ty}",
            if p.key { "#[key] " } else { "" },
            if p.mutable { "mut " } else { "" },
            p.name
        ));
    }
    let mut options = Vec::new();
    for &o in &case.options.order {
        match o {
            0 => {
                if let Some(upper) = case.options.pin {
                    let sha1 = case.sha1();
                    let sha1 = if upper {
                        sha1.to_ascii_uppercase()
                    } else {
                        sha1
                    };
                    options.push(format!("sha1 = \"{sha1}\""));
                }
            }
            1 => {
                if let Some(requires) = &case.options.requires {
                    options.push(format!("requires = \"{requires}\""));
                }
            }
            _ => {
                if case.options.renamed {
                    options.push("crate = \"crate::rt\"".to_owned());
                }
            }
        }
    }
    let mut attribute = format!("\"scripts/c{}.lua\"", case.index);
    for o in options {
        let _ = write!(attribute, ", {o}");
    }
    if case.options.trailing_comma {
        attribute.push(',');
    }
    let mut out = String::new();
    for attr in &case.attrs {
        let _ = writeln!(out, "{attr}");
    }
    let generics = if generics.is_empty() {
        String::new()
    } else {
        format!("<{}>", generics.join(", "))
    };
    let _ = write!(
        out,
        "#[::lockscript::lock_script({attribute})]\n{}fn {}{generics}({}) -> {};",
        case.vis,
        case.func,
        params.join(", "),
        case.ret
    );
    out
}

fn elem_type(elem: Elem, lt: &str) -> String {
    match elem {
        Elem::Str => format!("&{lt}str"),
        Elem::String => "String".to_owned(),
        Elem::VecU8 => "Vec<u8>".to_owned(),
        Elem::ByteSlice => format!("&{lt}[u8]"),
        Elem::I64 => "i64".to_owned(),
        Elem::OptStr => format!("Option<&{lt}str>"),
        Elem::Pair => format!("(&{lt}str, &{lt}str)"),
    }
}

/// The expression passed for a parameter.
fn argument(p: &super::model::Param) -> String {
    let (elem, shape) = match p.ty {
        Ty::Plain(elem, shape) => (elem, shape),
        Ty::Generic => (Elem::Str, Shape::One),
        Ty::Impl => {
            return match &p.values[0] {
                Val::Int(i64::MIN) => "i64::MIN".to_owned(),
                Val::Int(n) => format!("({n}i64)"),
                other => unreachable!("an impl parameter holds an i64, not {other:?}"),
            };
        }
    };
    let values: Vec<String> = p.values.iter().map(|v| value(elem, v)).collect();
    match shape {
        Shape::One => values.join(""),
        Shape::Slice | Shape::Array => format!("&[{}]", values.join(", ")),
        Shape::Vec => format!("vec![{}]", values.join(", ")),
    }
}

fn value(elem: Elem, v: &Val) -> String {
    match (elem, v) {
        (Elem::String, Val::Text(s)) => format!("String::from({s:?})"),
        (_, Val::Text(s)) => format!("{s:?}"),
        (Elem::VecU8, Val::Bytes(b)) => format!("{}.to_vec()", byte_literal(b)),
        (_, Val::Bytes(b)) => format!("&{}[..]", byte_literal(b)),
        (_, Val::Int(i64::MIN)) => "i64::MIN".to_owned(),
        (_, Val::Int(n)) => n.to_string(),
        (_, Val::Opt(Some(s))) => format!("Some({s:?})"),
        (_, Val::Opt(None)) => "None".to_owned(),
        (_, Val::Pair(a, b)) => format!("({a:?}, {b:?})"),
    }
}

fn byte_literal(bytes: &[u8]) -> String {
    let mut out = String::from("b\"");
    for &b in bytes {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
    out
}

/// The case for a failure message: its declaration, and every file in hex.
pub fn shown(case: &Case) -> String {
    let mut out = format!("declaration:\n{}\n", declaration(case));
    let args: Vec<String> = case.params.iter().map(argument).collect();
    let _ = writeln!(out, "call: {}({})", case.func, args.join(", "));
    for file in &case.script.files {
        let bytes = file.bytes();
        let _ = writeln!(
            out,
            "scripts/{} ({} bytes, {}): {}",
            file.path,
            bytes.len(),
            if std::str::from_utf8(&bytes).is_ok() {
                "UTF-8"
            } else {
                "not UTF-8"
            },
            hex(&bytes)
        );
        let _ = writeln!(out, "  as text: {:?}", String::from_utf8_lossy(&bytes));
    }
    if case.script.files.len() > 1 {
        let (expanded, _) = case.script.expanded();
        let _ = writeln!(out, "expanded: {}", hex(&expanded));
    }
    out
}
