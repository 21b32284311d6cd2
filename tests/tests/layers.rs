//! The layers of `lock-runtime/src`, checked on every test run: no module uses a module
//! that uses it back (directly or around a circle), and each layer uses only itself and
//! the layers below it:
//!
//! ```text
//! faces/    Locks, RwLocks, Semaphores, Redlock, blocking, guarded scripts, SQL fencing
//!   exec/     the async and blocking executors, backends, notifications, local queue
//!     machine/  the lock rules as plain state: no I/O, no waiting
//!       script/   Script, Invocation, delivery, pipelines, registry, built-in scripts
//! ```
//!
//! `lib.rs` (the crate's façade, which re-exports) and `error.rs` (`LockError`, which
//! every layer returns) stand outside the layers. A module's uses are the paths its code
//! names (`use` items, expressions, types, macro paths), read with `syn`; doc comments
//! are prose and do not count. Edges of the crate's own module tree (`mod x;`) are not
//! uses; `pub use` of a child is.
//!
//! Why not cargo-modules' `--acyclic`: on Rust 1.95 it stops at item-level self-cycles
//! (a type and its own method) before any module filter applies, its module edges
//! count a trait method called on `dyn Trait` as a use of the module of the trait's one
//! implementation, and it takes 12 minutes to build on the CI machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;
use syn::visit::Visit;

/// The layers, lowest first.
const LAYERS: [&str; 4] = ["script", "machine", "exec", "faces"];

/// Every module of `src` by its path (`exec::blocking::worker`; the root is `""`).
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut segments: Vec<String> = relative
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if segments.last().is_some_and(|s| s == "mod" || s == "lib") {
                segments.pop();
            }
            found.insert(segments.join("::"), path);
        }
    }
    found
}

/// The paths a file's code names, as segments (`use` trees flattened).
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl Paths {
    fn tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.push(prefix, &n.ident),
            syn::UseTree::Rename(r) => self.push(prefix, &r.ident),
            syn::UseTree::Glob(_) => self.0.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.tree(prefix, tree);
                }
            }
        }
    }

    fn push(&mut self, prefix: &[String], last: &syn::Ident) {
        let mut path = prefix.to_vec();
        if last != "self" {
            path.push(last.to_string());
        }
        self.0.push(path);
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.0
            .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        // A module's unit tests may use what they like.
        let test = item.attrs.iter().any(|a| {
            a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
        });
        if !test {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)` says who may use an item, not what it uses.
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Doc comments, cfgs, lints: no uses.
    }
}

/// The module a path named in module `from` refers to, if it is one of ours (the
/// longest known module prefix of the resolved path).
fn target(modules: &BTreeMap<String, PathBuf>, from: &str, path: &[String]) -> Option<String> {
    let here: Vec<&str> = if from.is_empty() {
        Vec::new()
    } else {
        from.split("::").collect()
    };
    let (mut base, rest): (Vec<&str>, &[String]) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (here.clone(), &path[1..]),
        Some("super") => {
            let mut base = here.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            (base, rest)
        }
        // A child module named without `self::`.
        Some(first) if modules.contains_key(&join(&here, first)) => (here.clone(), path),
        _ => return None,
    };
    let mut best = Some(base.join("::")).filter(|m| modules.contains_key(m));
    for segment in rest {
        base.push(segment);
        let name = base.join("::");
        if modules.contains_key(&name) {
            best = Some(name);
        } else {
            break;
        }
    }
    best
}

fn join(here: &[&str], next: &str) -> String {
    let mut all = here.to_vec();
    all.push(next);
    all.join("::")
}

/// A module's layer, by rank (`None`: the root and `error`, outside the layers).
fn layer(module: &str) -> Option<usize> {
    let top = module.split("::").next()?;
    LAYERS.iter().position(|l| *l == top)
}

#[test]
fn modules_form_no_circle_and_each_layer_uses_only_those_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lock-runtime/src");
    let modules = modules(&src);
    assert!(modules.len() > 40, "found {} modules", modules.len());
    let mut graph = DiGraph::<&str, ()>::new();
    let nodes: BTreeMap<&str, _> = modules
        .keys()
        .map(|m| (m.as_str(), graph.add_node(m.as_str())))
        .collect();
    let mut wrong_way = Vec::new();
    for (from, path) in &modules {
        let file = syn::parse_file(&std::fs::read_to_string(path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut paths = Paths::default();
        paths.visit_file(&file);
        for path in &paths.0 {
            let Some(to) = target(&modules, from, path) else {
                continue;
            };
            // The root re-exports everything; `error` is everyone's.
            if to == *from || to.is_empty() || from.is_empty() {
                continue;
            }
            if std::env::var_os("LAYERS_DEBUG").is_some() {
                eprintln!("{from} -> {to} ({})", path.join("::"));
            }
            graph.update_edge(nodes[from.as_str()], nodes[to.as_str()], ());
            if let (Some(a), Some(b)) = (layer(from), layer(&to))
                && b > a
            {
                wrong_way.push(format!("{from} uses {to} ({})", path.join("::")));
            }
            if from == "error" {
                wrong_way.push(format!("error uses {to}: LockError must stand on its own"));
            }
        }
    }
    let circles: Vec<Vec<&str>> = tarjan_scc(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .map(|scc| scc.into_iter().map(|n| graph[n]).collect())
        .collect();
    assert!(
        circles.is_empty(),
        "modules that use each other around a circle: {circles:?}"
    );
    wrong_way.sort();
    wrong_way.dedup();
    assert!(
        wrong_way.is_empty(),
        "uses of a higher layer (script < machine < exec < faces):\n{}",
        wrong_way.join("\n")
    );
}

#[test]
fn paths_resolve_to_the_modules_they_name() {
    // The check's own check, on a made-up module tree.
    let modules: BTreeMap<String, PathBuf> = ["", "machine", "machine::a", "exec", "exec::b"]
        .into_iter()
        .map(|m| (m.to_owned(), PathBuf::new()))
        .collect();
    let path = |p: &str| p.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        target(&modules, "machine::a", &path("crate::exec::b::Thing")),
        Some("exec::b".to_owned())
    );
    assert_eq!(
        target(&modules, "exec::b", &path("super::super::machine::a::f")),
        Some("machine::a".to_owned())
    );
    assert_eq!(
        target(&modules, "exec", &path("b::Thing")),
        Some("exec::b".to_owned())
    );
    assert_eq!(target(&modules, "exec", &path("std::sync::Arc")), None);
    assert_eq!(
        target(&modules, "exec::b", &path("super::Conn")),
        Some("exec".to_owned())
    );
    assert!(layer("exec::b") > layer("machine::a"));
}
