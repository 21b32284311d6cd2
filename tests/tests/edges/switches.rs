//! Input classes that a run can leave out, `LOCKSCRIPT_EDGES_OFF=class,class`: each
//! found a defect, so that while its fix is pending the rest of the test still says
//! something. All are on by default.

use std::collections::BTreeSet;

use super::generate::EMPTY_FLAG;
use super::model::{Case, Elem, LineKind, RESERVED, Shape, Ty, Val, is_comment};

/// Each class and what switching it off does to a drawn case (or to its judgement).
pub const CLASSES: &[(&str, &str)] = &[
    (
        "reserved-names",
        "parameters named `invocation`, `__LOCK_SCRIPT` or `__LOCK_SCRIPT_REGISTERED`, the \
         names of the expansion's own local and statics (renamed `pN_renamed`)",
    ),
    (
        "option-key-slices",
        "variadic `#[key]` slices of `Option<&str>` (made `&str`, `None` as \"none\")",
    ),
    (
        "tuple-key-slices",
        "variadic `#[key]` slices of `(&str, &str)` (made `&str`, the pair's first)",
    ),
    (
        "cr-after-comments",
        "a lone CR ending a `--` comment line (not an `@include` one), where Lua ends the \
         comment (made LF)",
    ),
    (
        "cr-includes",
        "a lone CR ending an `@include` line or the line before it (made LF)",
    ),
    (
        "empty-shebang-flags",
        "an empty flag in the shebang (`flags=no-writes,`), which every server refuses \
         (the empty flag taken out)",
    ),
    (
        "nul-bytes",
        "a raw NUL byte in a script (in a string or a comment): Valkey 9.1's FUNCTION LOAD \
         stops reading the library there, so no script of the binary runs as a function \
         (the NUL taken out)",
    ),
    (
        "non-utf8-functions",
        "the Functions checks of scripts that are not UTF-8 (not judged)",
    ),
    (
        "non-utf8-pipelines",
        "the pipeline command counts of scripts that are not UTF-8 (not judged)",
    ),
    (
        "floor-functions",
        "the Functions checks of scripts calling a command the server lacks (not judged)",
    ),
    (
        "floor-pipelines",
        "the pipeline checks of scripts calling a command the server lacks (not judged)",
    ),
    (
        "pre7-unknown-commands",
        "on a server before Redis 7.0, the calls of commands it does not have \
         (`EVALSHA_RO`/`EVAL_RO` of `no-writes` scripts, FCALL): their refusal echoes the \
         arguments, which redis-rs cannot read when they are not UTF-8, and MULTI aborts \
         (not judged)",
    ),
    (
        "pre7-pipeline-shebang",
        "on a server before Redis 7.0, the second call of a script with a shebang in a \
         pipeline, after the server refused the first (not judged)",
    ),
];

/// The classes switched off.
#[derive(Clone, Debug, Default)]
pub struct Switches {
    off: BTreeSet<String>,
}

impl Switches {
    /// From `LOCKSCRIPT_EDGES_OFF`; an unknown class name is refused with the list.
    pub fn from_env() -> Self {
        let off: BTreeSet<String> = std::env::var("LOCKSCRIPT_EDGES_OFF")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        for name in &off {
            assert!(
                CLASSES.iter().any(|(class, _)| class == name),
                "LOCKSCRIPT_EDGES_OFF names `{name}`; the classes are:\n{}",
                CLASSES
                    .iter()
                    .map(|(class, what)| format!("  {class}: {what}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        Self { off }
    }

    pub fn on(&self, class: &str) -> bool {
        !self.off.contains(class)
    }

    pub fn off(&self) -> impl Iterator<Item = &str> {
        self.off.iter().map(String::as_str)
    }

    /// Takes the classes switched off out of a drawn case.
    pub fn apply(&self, case: &mut Case) {
        for (position, param) in case.params.iter_mut().enumerate() {
            if !self.on("reserved-names") && RESERVED.contains(&param.name.as_str()) {
                param.name = format!("p{position}_renamed");
            }
            let off = |class| !self.on(class);
            match param.ty {
                Ty::Plain(Elem::OptStr, shape)
                    if param.key && shape != Shape::One && off("option-key-slices") =>
                {
                    param.ty = Ty::Plain(Elem::Str, shape);
                    for v in &mut param.values {
                        if let Val::Opt(o) = v {
                            *v = Val::Text(o.take().unwrap_or_else(|| "none".to_owned()));
                        }
                    }
                }
                Ty::Plain(Elem::Pair, shape)
                    if param.key && shape != Shape::One && off("tuple-key-slices") =>
                {
                    param.ty = Ty::Plain(Elem::Str, shape);
                    for v in &mut param.values {
                        if let Val::Pair(a, _) = v {
                            *v = Val::Text(std::mem::take(a));
                        }
                    }
                }
                // Refused at compile time by design, with a spanned error (the ui case
                // `impl-trait-param`): the generated call could not tell a variadic
                // slice behind `impl ToRedisArgs`. Drawn, then made `i64`.
                Ty::Impl => {
                    param.ty = Ty::Plain(Elem::I64, Shape::One);
                }
                _ => {}
            }
        }
        if !self.on("empty-shebang-flags") && case.script.refused == Some(EMPTY_FLAG) {
            let line = &mut case.script.files[0].lines[0];
            let mut text = String::from_utf8_lossy(&line.text).into_owned();
            while text.contains(",,") {
                text = text.replace(",,", ",");
            }
            text = text.replace("=,", "=");
            text.truncate(text.trim_end_matches(',').len());
            line.text = text.into_bytes();
            case.script.refused = None;
        }
        if !self.on("nul-bytes") {
            for line in case.script.files.iter_mut().flat_map(|f| &mut f.lines) {
                if line.text.contains(&0) {
                    // A raw NUL is only ever in a raw string (an escaped one writes `\000`)
                    // or a comment: the piece's value loses it too.
                    line.text.retain(|b| *b != 0);
                    if let LineKind::Piece(value) = &mut line.kind {
                        value.retain(|b| *b != 0);
                    }
                }
            }
        }
        if !self.on("cr-after-comments") {
            // `@include` lines are comments too, but `cr-includes`'.
            for line in case.script.files.iter_mut().flat_map(|f| &mut f.lines) {
                if line.eol == b"\r"
                    && is_comment(&line.text)
                    && !matches!(line.kind, LineKind::Include(_))
                {
                    line.eol = b"\n";
                }
            }
        }
        if !self.on("cr-includes") {
            for file in &mut case.script.files {
                for i in 0..file.lines.len() {
                    let next_is_include = file
                        .lines
                        .get(i + 1)
                        .is_some_and(|l| matches!(l.kind, LineKind::Include(_)));
                    let line = &mut file.lines[i];
                    if line.eol == b"\r"
                        && (next_is_include || matches!(line.kind, LineKind::Include(_)))
                    {
                        line.eol = b"\n";
                    }
                }
            }
        }
    }
}
