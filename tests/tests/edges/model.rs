//! One generated case: a `#[lock_script]` declaration (its signature, options and the
//! values a call passes), its script's files, and what a server must see for it.
//!
//! Every expectation is computed here from the case itself (the bytes as the generator
//! wrote them, the values as redis-rs documents their encoding), never read back from
//! the macro or the runtime.

use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The element type of a parameter, or the type of a single one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    Str,
    String,
    VecU8,
    ByteSlice,
    I64,
    OptStr,
    Pair,
}

/// How a parameter holds its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One value: one slot.
    One,
    /// `&[T]`: variadic.
    Slice,
    /// `Vec<T>`: variadic.
    Vec,
    /// `&[T; N]`: variadic.
    Array,
}

/// A parameter's declared type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    Plain(Elem, Shape),
    /// A type parameter `Tn: redis::ToRedisArgs`, called with a `&str`.
    Generic,
    /// `impl redis::ToRedisArgs`, called with an `i64`.
    Impl,
}

impl Ty {
    pub fn variadic(self) -> bool {
        matches!(self, Ty::Plain(_, shape) if shape != Shape::One)
    }
}

/// One value passed for a parameter (one element of a slice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Text(String),
    Bytes(Vec<u8>),
    Int(i64),
    Opt(Option<String>),
    Pair(String, String),
}

impl Val {
    /// The arguments redis-rs sends for it: one for a string, bytes or an integer (in
    /// decimal), none for `None`, two for a pair.
    pub fn wire(&self) -> Vec<Vec<u8>> {
        match self {
            Val::Text(s) | Val::Opt(Some(s)) => vec![s.clone().into_bytes()],
            Val::Bytes(b) => vec![b.clone()],
            Val::Int(n) => vec![n.to_string().into_bytes()],
            Val::Opt(None) => Vec::new(),
            Val::Pair(a, b) => vec![a.clone().into_bytes(), b.clone().into_bytes()],
        }
    }
}

/// A parameter of the declaration.
#[derive(Clone, Debug)]
pub struct Param {
    /// As written: `keys`, `r#type`.
    pub name: String,
    pub key: bool,
    pub ty: Ty,
    /// One for a single value, any number for a variadic one.
    pub values: Vec<Val>,
    /// Declared `mut name`.
    pub mutable: bool,
}

impl Param {
    pub fn wire(&self) -> Vec<Vec<u8>> {
        self.values.iter().flat_map(Val::wire).collect()
    }
}

/// What a line of a script file is, for the expansion and the marker.
#[derive(Clone, Debug)]
pub enum LineKind {
    Code,
    /// Appends these bytes to the script's marker when it runs.
    Piece(Vec<u8>),
    /// `--- @include "..."` of the file with this index.
    Include(usize),
}

#[derive(Clone, Debug)]
pub struct Line {
    pub text: Vec<u8>,
    /// `\n`, `\r\n`, a lone `\r`, or nothing on a last line.
    pub eol: &'static [u8],
    pub kind: LineKind,
}

/// A script file: the script (index 0) or a file it includes.
#[derive(Clone, Debug)]
pub struct File {
    /// Relative to the generated crate's `scripts/` folder: `c7.lua`, `c7/i0.lua`.
    pub path: String,
    pub lines: Vec<Line>,
}

impl File {
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for line in &self.lines {
            out.extend_from_slice(&line.text);
            out.extend_from_slice(line.eol);
        }
        out
    }
}

/// A command that only some servers have, called by the script.
#[derive(Clone, Copy, Debug)]
pub struct FloorCommand {
    pub name: &'static str,
    /// The rest of the call after the name. Its keys are built (`'edges:' .. ...`), not
    /// written: a key written into a script is refused at compile time.
    pub args: &'static str,
    pub write: bool,
    /// The first Redis that has it (`None`: no Redis).
    pub redis: Option<(u32, u32)>,
    /// The first Valkey that has it (`None`: no Valkey).
    pub valkey: Option<(u32, u32)>,
}

/// The commands the generator draws from, with the first versions that have them (from
/// each server's own `COMMAND DOCS`).
pub const FLOOR_COMMANDS: &[FloorCommand] = &[
    FloorCommand {
        name: "HTTL",
        args: "'edges:' .. 'absent', 'FIELDS', 1, 'f'",
        write: false,
        redis: Some((7, 4)),
        valkey: Some((9, 0)),
    },
    FloorCommand {
        name: "HPEXPIRETIME",
        args: "'edges:' .. 'absent', 'FIELDS', 1, 'f'",
        write: false,
        redis: Some((7, 4)),
        valkey: Some((9, 0)),
    },
    FloorCommand {
        name: "HGETEX",
        args: "'edges:' .. 'absent', 'FIELDS', 1, 'f'",
        write: true,
        redis: Some((8, 0)),
        valkey: Some((9, 0)),
    },
    FloorCommand {
        name: "HGETDEL",
        args: "'edges:' .. 'absent', 'FIELDS', 1, 'f'",
        write: true,
        redis: Some((8, 0)),
        valkey: Some((9, 1)),
    },
    FloorCommand {
        name: "XACKDEL",
        args: "'edges:' .. 'absent', 'g', 'IDS', 1, '0-1'",
        write: true,
        redis: Some((8, 2)),
        valkey: None,
    },
    FloorCommand {
        name: "DELIFEQ",
        args: "'edges:' .. 'absent', 'v'",
        write: true,
        redis: None,
        valkey: Some((9, 0)),
    },
    FloorCommand {
        name: "LCS",
        args: "'edges:' .. 'absent', 'edges:' .. 'other'",
        write: false,
        redis: Some((7, 0)),
        valkey: Some((7, 2)),
    },
];

/// The script's use of a [`FloorCommand`].
#[derive(Clone, Copy, Debug)]
pub struct FloorUse {
    pub command: FloorCommand,
    /// `redis.pcall`: the script goes on when the server lacks the command.
    pub pcall: bool,
}

/// The script: its files and what the generator put in them.
#[derive(Clone, Debug)]
pub struct Script {
    pub files: Vec<File>,
    /// The shebang's flags, in order (`None`: no shebang).
    pub flags: Option<Vec<String>>,
    pub floor: Option<FloorUse>,
    /// Why every server refuses the script, when it does: the build must refuse it too.
    pub refused: Option<&'static str>,
}

impl Script {
    /// The bytes the macro must hash and every delivery send: the file with its
    /// `@include` lines replaced by the files they name (each file once; a later line
    /// naming it is dropped; a newline after an included file that does not end with
    /// one), and the marker the script returns (its pieces in the order they run).
    pub fn expanded(&self) -> (Vec<u8>, Vec<u8>) {
        let mut out = Vec::new();
        let mut marker = Vec::new();
        let mut seen = vec![0];
        self.splice(0, &mut out, &mut marker, &mut seen);
        (out, marker)
    }

    fn splice(&self, file: usize, out: &mut Vec<u8>, marker: &mut Vec<u8>, seen: &mut Vec<usize>) {
        for line in &self.files[file].lines {
            match &line.kind {
                LineKind::Include(target) => {
                    if seen.contains(target) {
                        continue;
                    }
                    seen.push(*target);
                    self.splice(*target, out, marker, seen);
                    if !out.is_empty() && !out.ends_with(b"\n") {
                        out.push(b'\n');
                    }
                }
                LineKind::Piece(bytes) => {
                    marker.extend_from_slice(bytes);
                    out.extend_from_slice(&line.text);
                    out.extend_from_slice(line.eol);
                }
                LineKind::Code => {
                    out.extend_from_slice(&line.text);
                    out.extend_from_slice(line.eol);
                }
            }
        }
    }

    pub fn read_only(&self) -> bool {
        self.flags
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == "no-writes"))
    }
}

/// The attribute's options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `sha1 = "..."` with the script's digest: `Some(true)` in uppercase.
    pub pin: Option<bool>,
    /// `requires = "..."`, always met by the script.
    pub requires: Option<String>,
    /// `crate = "crate::rt"`.
    pub renamed: bool,
    /// The options in the order written, and a trailing comma.
    pub order: Vec<usize>,
    pub trailing_comma: bool,
}

/// One generated declaration and the call of it.
#[derive(Clone, Debug)]
pub struct Case {
    pub index: usize,
    /// The function's name as written.
    pub func: String,
    pub vis: &'static str,
    pub attrs: Vec<&'static str>,
    pub params: Vec<Param>,
    /// Every reference in the signature carries `'a`.
    pub lifetime: bool,
    pub ret: &'static str,
    pub options: Options,
    pub script: Script,
}

/// What a call of a case does, whatever the server: refused for a parameter, or run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `LockError::Argument`: the parameter (as written) and how many arguments it became.
    Argument(String, usize),
    /// The script's reply, as the driver prints values.
    Reply(String),
}

impl Case {
    pub fn keys(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| p.key)
    }

    pub fn args(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| !p.key)
    }

    pub fn keys_variadic(&self) -> bool {
        self.keys().any(|p| p.ty.variadic())
    }

    pub fn args_variadic(&self) -> bool {
        self.args().any(|p| p.ty.variadic())
    }

    /// The KEYS and the ARGV the server must see, in order.
    pub fn wire(&self) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        (
            self.keys().flat_map(Param::wire).collect(),
            self.args().flat_map(Param::wire).collect(),
        )
    }

    /// What a call does: the first single-slot parameter (keys are pushed first) that
    /// does not become exactly one argument is refused; otherwise the script returns
    /// `{#KEYS, #ARGV, marker, KEYS..., ARGV...}`.
    pub fn outcome(&self) -> Outcome {
        for p in self.keys().chain(self.args()) {
            if !p.ty.variadic() {
                let count = p.wire().len();
                if count != 1 {
                    return Outcome::Argument(p.name.clone(), count);
                }
            }
        }
        let (keys, args) = self.wire();
        let (_, marker) = self.script.expanded();
        let mut items = vec![
            format!("i:{}", keys.len()),
            format!("i:{}", args.len()),
            format!("b:{}", hex(&marker)),
        ];
        items.extend(keys.iter().chain(&args).map(|v| format!("b:{}", hex(v))));
        Outcome::Reply(format!("ok:[{}]", items.join(",")))
    }

    /// The SHA1 of the bytes the script must send, as `sha1sum` prints it.
    pub fn sha1(&self) -> String {
        let (bytes, _) = self.script.expanded();
        sha1_smol::Sha1::from(&bytes).digest().to_string()
    }

    /// `name|path|keys|args|read_only|flags`, as the driver prints the `Script`.
    pub fn meta(&self) -> String {
        let arity = |params: Vec<&Param>| {
            let fixed = params.iter().filter(|p| !p.ty.variadic()).count();
            if params.iter().any(|p| p.ty.variadic()) {
                format!("{fixed}+")
            } else {
                fixed.to_string()
            }
        };
        format!(
            "c{}|scripts/c{}.lua|{}|{}|{}|{}",
            self.index,
            self.index,
            arity(self.keys().collect()),
            arity(self.args().collect()),
            self.script.read_only(),
            self.script.flags.clone().unwrap_or_default().join(",")
        )
    }

    /// Names of the input classes the case belongs to, for the failure summary.
    pub fn tags(&self) -> BTreeSet<String> {
        let mut tags = self.script_tags();
        self.signature_tags(&mut tags);
        tags
    }

    /// The classes of the script's bytes.
    fn script_tags(&self) -> BTreeSet<String> {
        let mut tags = BTreeSet::new();
        let (bytes, _) = self.script.expanded();
        if std::str::from_utf8(&bytes).is_err() {
            tags.insert("non-utf8".to_owned());
        }
        if bytes.contains(&0) {
            tags.insert("nul-byte".to_owned());
        }
        if bytes.windows(3).any(|w| w == "\u{feff}".as_bytes()) {
            tags.insert("bom-inside".to_owned());
        }
        let all_lines = self.script.files.iter().flat_map(|f| &f.lines);
        for line in all_lines {
            match line.eol {
                b"\r\n" => tags.insert("crlf".to_owned()),
                b"\r" => tags.insert("lone-cr".to_owned()),
                _ => false,
            };
        }
        if self.script.files.len() > 1 {
            tags.insert("include".to_owned());
        }
        if self.cr_include() {
            tags.insert("cr-include".to_owned());
        }
        if self.cr_after_comment() {
            tags.insert("cr-after-comment".to_owned());
        }
        if self.cr_hides_code() {
            tags.insert("cr-hides-code".to_owned());
        }
        if self.cr_include_dropped() {
            tags.insert("cr-include-dropped".to_owned());
        }
        if let Some(why) = self.script.refused {
            tags.insert(format!("refused:{why}"));
        }
        if let Some(flags) = &self.script.flags {
            tags.insert("shebang".to_owned());
            if self.script.read_only() {
                tags.insert("no-writes".to_owned());
            }
            if flags.is_empty() {
                tags.insert("shebang-without-flags".to_owned());
            }
        }
        if let Some(floor) = self.script.floor {
            tags.insert(format!("floor:{}", floor.command.name));
            if floor.pcall {
                tags.insert("floor-pcall".to_owned());
            }
        }
        if self.script.files[0]
            .lines
            .last()
            .is_some_and(|l| l.eol.is_empty())
        {
            tags.insert("no-final-newline".to_owned());
        }
        tags
    }

    /// The classes of the declaration and its call.
    fn signature_tags(&self, tags: &mut BTreeSet<String>) {
        let o = &self.options;
        for (set, tag) in [
            (o.pin.is_some(), "sha1-pin"),
            (o.requires.is_some(), "requires"),
            (o.renamed, "crate-renamed"),
            (self.lifetime, "lifetime"),
        ] {
            if set {
                tags.insert(tag.to_owned());
            }
        }
        for p in &self.params {
            if RESERVED.contains(&p.name.as_str()) {
                tags.insert(format!("reserved-name:{}", p.name));
            }
            if p.name.starts_with("r#") {
                tags.insert("raw-ident".to_owned());
            }
            let side = if p.key { "key" } else { "arg" };
            match p.ty {
                Ty::Generic => {
                    tags.insert("generic-param".to_owned());
                }
                Ty::Impl => {
                    tags.insert("impl-trait-param".to_owned());
                }
                // redis-rs counts a slice of two or more elements as one argument each
                // (`num_of_args`), which a `None` (none) or a pair (two) is not.
                Ty::Plain(Elem::OptStr, shape) if shape != Shape::One => {
                    tags.insert(format!("option-{side}-slice"));
                    if p.values.len() > 1 && p.values.contains(&Val::Opt(None)) {
                        tags.insert(format!("option-{side}-slice-miscounted"));
                    }
                }
                Ty::Plain(Elem::Pair, shape) if shape != Shape::One => {
                    tags.insert(format!("tuple-{side}-slice"));
                    if p.values.len() > 1 {
                        tags.insert(format!("tuple-{side}-slice-miscounted"));
                    }
                }
                Ty::Plain(_, shape) if shape != Shape::One && p.values.is_empty() => {
                    tags.insert("empty-slice".to_owned());
                }
                Ty::Plain(..) => {}
            }
        }
        if self.options.pin == Some(true) {
            tags.insert("sha1-pin-uppercase".to_owned());
        }
        if matches!(self.outcome(), Outcome::Argument(..)) {
            tags.insert("argument-error".to_owned());
        }
    }

    /// An `@include` line, or the line before one, ends in a lone `\r`: Lua ends a line
    /// there, so the include line is a line of its own.
    pub fn cr_include(&self) -> bool {
        self.script.files.iter().any(|f| {
            f.lines.iter().enumerate().any(|(i, line)| {
                matches!(line.kind, LineKind::Include(_))
                    && (line.eol == b"\r" || i > 0 && f.lines[i - 1].eol == b"\r")
            })
        })
    }

    /// A `--` comment line ends in a lone `\r`, where Lua ends it.
    pub fn cr_after_comment(&self) -> bool {
        self.script
            .files
            .iter()
            .flat_map(|f| &f.lines)
            .any(|line| line.eol == b"\r" && is_comment(&line.text))
    }

    /// A `--` comment line ends in a lone `\r` and a line follows that the macro's checks
    /// read (a definition, KEYS or ARGV, a command): a parser that does not end the
    /// comment there misses it.
    pub fn cr_hides_code(&self) -> bool {
        self.script.files.iter().any(|f| {
            f.lines.windows(2).any(|pair| {
                let next = String::from_utf8_lossy(&pair[1].text);
                let next = next.trim_start();
                pair[0].eol == b"\r"
                    && is_comment(&pair[0].text)
                    && ["local ", "out[", "for ", "redis."]
                        .iter()
                        .any(|start| next.starts_with(start))
            })
        })
    }

    /// Reading the files' lines as ended by `\n` only (so that an `@include` line after
    /// a lone `\r`, or ending in one, is not a line of its own) expands them to other
    /// bytes.
    pub fn cr_include_dropped(&self) -> bool {
        let mut lf_only = self.script.clone();
        for file in &mut lf_only.files {
            for i in 0..file.lines.len() {
                let after_cr = i > 0 && file.lines[i - 1].eol == b"\r";
                let line = &mut file.lines[i];
                if matches!(line.kind, LineKind::Include(_)) && (after_cr || line.eol == b"\r") {
                    line.kind = LineKind::Code;
                }
            }
        }
        lf_only.expanded().0 != self.script.expanded().0
    }
}

/// A line that is a `--` comment (an `@include` line is one).
pub fn is_comment(text: &[u8]) -> bool {
    let start = text
        .iter()
        .position(|b| !b" \t".contains(b))
        .unwrap_or(text.len());
    text[start..].starts_with(b"--")
}

/// Parameter names the macro's expansion has used for its own items and locals.
pub const RESERVED: &[&str] = &["invocation", "__LOCK_SCRIPT", "__LOCK_SCRIPT_REGISTERED"];

pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}
