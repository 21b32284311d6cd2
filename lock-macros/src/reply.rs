//! Holds the declared return type against what each `return` of the script may give.
//!
//! The shapes come from `lockscript_audit::lua::Analysis::returns`, the rules of each type
//! from `lockscript_audit::reply::Declared` (redis-rs's `FromRedisValue`); this module only
//! reads the Rust type. A type it does not know (a user's own, an alias, a path it cannot
//! place) is `Declared::Any` and never an error.

use syn::{GenericArgument, LitStr, PathArguments, ReturnType, Type};

use crate::source::Source;
use lockscript_audit::lua::Analysis;
use lockscript_audit::reply::Declared;

/// An error on `lit` for each `return` whose reply the declared type cannot read.
pub(crate) fn check(
    lit: &LitStr,
    output: &ReturnType,
    source: &Source,
    analysis: &Analysis,
    errors: &mut Vec<syn::Error>,
) {
    let ReturnType::Type(_, ty) = output else {
        return;
    };
    let declared = declared(ty);
    if declared == Declared::Any {
        return;
    }
    let shown = shown(ty);
    for ret in &analysis.returns {
        let Some(refusal) = declared.refusal(&shown, &ret.shapes) else {
            continue;
        };
        let what = if ret.implicit {
            "the script can end without a `return`, and so reply nil".to_owned()
        } else {
            format!("this `return` may reply {}", refusal.found)
        };
        errors.push(syn::Error::new(
            lit.span(),
            format!(
                "{}: {what} (its reply: {}), which the declared `{shown}` cannot read: {}",
                source.shown(ret.at),
                ret.shapes,
                refusal.fix
            ),
        ));
    }
}

/// The type as written, without the spaces token printing puts in (`Option<String>`).
fn shown(ty: &Type) -> String {
    let text = quote::quote!(#ty).to_string();
    text.replace(" < ", "<")
        .replace("< ", "<")
        .replace(" <", "<")
        .replace(" >", ">")
        .replace(" :: ", "::")
        .replace(":: ", "::")
        .replace(" ,", ",")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace("[ ", "[")
        .replace(" ]", "]")
}

/// What the check knows of `ty`: the standard types redis-rs converts, by name; a path
/// of more than one segment only under `std`, `alloc` or `core` (or `redis::Value`).
pub(crate) fn declared(ty: &Type) -> Declared {
    match ty {
        Type::Paren(p) => declared(&p.elem),
        Type::Group(g) => declared(&g.elem),
        Type::Tuple(t) if !t.elems.is_empty() => {
            Declared::Tuple(t.elems.iter().map(declared).collect())
        }
        Type::Path(p) if p.qself.is_none() => {
            let segments: Vec<_> = p.path.segments.iter().collect();
            let Some(last) = segments.last() else {
                return Declared::Any;
            };
            let known_place = segments.len() == 1
                || matches!(
                    segments[0].ident.to_string().as_str(),
                    "std" | "alloc" | "core"
                );
            if !known_place {
                return Declared::Any;
            }
            let args = type_args(&last.arguments);
            let one = |f: fn(Box<Declared>) -> Declared| match args.as_slice() {
                [t, ..] => f(Box::new(declared(t))),
                [] => Declared::Any,
            };
            match (last.ident.to_string().as_str(), args.as_slice()) {
                ("String", []) => Declared::Text,
                (
                    "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64"
                    | "u128" | "usize",
                    [],
                ) => Declared::Integer,
                ("f32" | "f64", []) => Declared::Float,
                ("bool", []) => Declared::Bool,
                ("Option", [_]) => one(Declared::Option),
                ("Vec", [t]) if is_u8(t) => Declared::Bytes,
                ("Vec", [_]) => one(Declared::List),
                ("Box" | "Arc" | "Rc", [Type::Slice(s)]) if is_u8(&s.elem) => Declared::Bytes,
                ("Box" | "Arc", [Type::Slice(s)]) => Declared::List(Box::new(declared(&s.elem))),
                ("Box" | "Arc" | "Rc", [t]) => declared(t),
                ("HashSet" | "BTreeSet", [_, ..]) => one(Declared::Set),
                ("HashMap" | "BTreeMap", [k, v, ..]) => {
                    Declared::Map(Box::new(declared(k)), Box::new(declared(v)))
                }
                _ => Declared::Any,
            }
        }
        _ => Declared::Any,
    }
}

fn is_u8(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("u8"))
}

fn type_args(arguments: &PathArguments) -> Vec<&Type> {
    match arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|a| match a {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::{declared, shown};
    use lockscript_audit::reply::Declared;

    /// Every `.rs` and `.md` file below `dir`, without build output and the compile-fail
    /// cases.
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | "ui" | ".git" | "node_modules") {
                    sources(&path, out);
                }
            } else if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("rs") || e.eq_ignore_ascii_case("md"))
            {
                out.push(path);
            }
        }
    }

    /// The nearest directory above `file` with a Cargo.toml: the crate whose
    /// `CARGO_MANIFEST_DIR` the script path is relative to.
    fn manifest_dir(file: &Path) -> Option<&Path> {
        file.ancestors()
            .skip(1)
            .find(|d| d.join("Cargo.toml").is_file())
    }

    /// `(script path, signature)` of each `#[lock_script("...")]` of `text` (not in a
    /// comment), the signature read up to its `;`.
    fn declarations(text: &str) -> Vec<(String, syn::Signature)> {
        let mut found = Vec::new();
        // Doc examples (`///`, `//!`, a guide's code blocks) are compiled too; other
        // comments are not code.
        let code: String = text
            .lines()
            .map(|l| {
                let t = l.trim_start();
                let doc = t.strip_prefix("///").or_else(|| t.strip_prefix("//!"));
                match doc {
                    Some(rest) => rest.trim_start().trim_start_matches("# "),
                    None if t.starts_with("//") => "",
                    None => l,
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        for (at, _) in code.match_indices("#[lock_script(\"") {
            let rest = &code[at + "#[lock_script(\"".len()..];
            let Some(end) = rest.find('"') else { continue };
            let path = rest[..end].to_owned();
            let Some(fn_at) = rest.find("fn ") else {
                continue;
            };
            let Some(semi) = rest[fn_at..].find(';') else {
                continue;
            };
            let sig = &rest[fn_at..fn_at + semi];
            if let Ok(sig) = syn::parse_str::<syn::Signature>(sig) {
                found.push((path, sig));
            }
        }
        found
    }

    /// The project's own scripts, as its crates declare them (the built-in wrappers, the
    /// harness's fixtures, the examples, doc examples and the guide, the passing ui cases,
    /// bull's scripts when fetched): no declared return type is refused.
    #[test]
    fn the_projects_own_declarations_raise_no_false_alarm() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        sources(&root, &mut files);
        let mut checked = 0;
        let mut alarms = Vec::new();
        for file in &files {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            for (path, sig) in declarations(&text) {
                let Some(dir) = manifest_dir(file) else {
                    continue;
                };
                // A passing ui case reads its script from `ui/`, staged beside it.
                let staged = dir.join("ui").join(&path);
                let script = if staged.is_file() {
                    staged
                } else {
                    dir.join(&path)
                };
                let Ok(expanded) = lockscript_audit::include::expand(&script) else {
                    // bull's scripts before `tests/corpus.sh fetch bull`.
                    continue;
                };
                let syn::ReturnType::Type(_, ty) = &sig.output else {
                    continue;
                };
                let analysis = lockscript_audit::lua::analyze(&expanded.text);
                let want = declared(ty);
                checked += 1;
                for ret in &analysis.returns {
                    if let Some(refusal) = want.refusal(&shown(ty), &ret.shapes) {
                        alarms.push(format!(
                            "{}: {path}:{} {} -> {}: {refusal:?}",
                            file.display(),
                            ret.at,
                            ret.shapes,
                            shown(ty)
                        ));
                    }
                }
            }
        }
        assert!(checked >= 20, "only {checked} declarations found");
        eprintln!("{checked} declarations checked");
        assert!(alarms.is_empty(), "{alarms:#?}");
    }

    /// BullMQ's scripts (when `tests/corpus.sh fetch bullmq` has fetched them), each
    /// declared with the reply its header documents (`Output:`): none is refused.
    #[test]
    fn bullmq_scripts_declared_as_documented_raise_no_false_alarm() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/corpus/bullmq-5.61.0/package/dist/cjs/commands");
        if !dir.is_dir() {
            eprintln!("{} not fetched: skipped", dir.display());
            return;
        }
        let declared_as = [
            ("addDelayedJob-6", "String"),
            ("addParentJob-5", "String"),
            ("addPrioritizedJob-9", "String"),
            ("addStandardJob-9", "String"),
            ("addRepeatableJob-2", "String"),
            ("updateRepeatableJobMillis-1", "String"),
            ("addLog-2", "i64"),
            ("changeDelay-4", "i64"),
            ("changePriority-7", "i64"),
            ("getState-8", "String"),
            ("getStateV2-8", "String"),
            ("isJobInList-1", "Option<i64>"),
            ("isMaxed-2", "bool"),
            ("moveJobsToWait-8", "i64"),
            ("moveToDelayed-8", "i64"),
            ("moveToWaitingChildren-7", "i64"),
            ("promote-9", "i64"),
            ("removeChildDependency-1", "i64"),
            ("removeJobScheduler-3", "i64"),
            ("removeRepeatable-3", "i64"),
            ("reprocessJob-8", "i64"),
            ("saveStacktrace-1", "i64"),
            ("updateData-1", "i64"),
            ("updateProgress-3", "i64"),
            ("extendLocks-1", "Vec<String>"),
            ("paginate-1", "redis::Value"),
        ];
        let mut alarms = Vec::new();
        for (name, ty) in declared_as {
            let expanded = lockscript_audit::include::expand(&dir.join(format!("{name}.lua")))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let analysis = lockscript_audit::lua::analyze(&expanded.text);
            let ty: syn::Type = syn::parse_str(ty).unwrap();
            for ret in &analysis.returns {
                if let Some(refusal) = declared(&ty).refusal(&shown(&ty), &ret.shapes) {
                    alarms.push(format!(
                        "{name}:{} {} -> {}: {refusal:?}",
                        ret.at,
                        ret.shapes,
                        shown(&ty)
                    ));
                }
            }
        }
        assert!(alarms.is_empty(), "{alarms:#?}");
    }

    #[test]
    fn declared_types_are_read_by_their_standard_names() {
        let ty = |s: &str| syn::parse_str::<syn::Type>(s).unwrap();
        assert_eq!(declared(&ty("String")), Declared::Text);
        assert_eq!(declared(&ty("std::string::String")), Declared::Text);
        assert_eq!(declared(&ty("Vec<u8>")), Declared::Bytes);
        assert_eq!(
            declared(&ty("Option<i64>")),
            Declared::Option(Box::new(Declared::Integer))
        );
        assert_eq!(
            declared(&ty("(i64, String)")),
            Declared::Tuple(vec![Declared::Integer, Declared::Text])
        );
        // Not judged: a user's type, a path of another crate, `()`, `redis::Value`.
        for other in ["Reply", "my::String", "()", "redis::Value", "[i64; 2]"] {
            assert_eq!(declared(&ty(other)), Declared::Any, "{other}");
        }
        assert_eq!(
            shown(&ty("Option < Vec < String > >")),
            "Option<Vec<String>>"
        );
    }
}
