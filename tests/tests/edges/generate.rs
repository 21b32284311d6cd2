//! Draws cases: signatures (names, key and argument types, slices, options) and script
//! bytes (raw, escaped and long strings, non-UTF-8, CRLF and lone CR, a BOM inside a
//! string, NULs, shebangs, `@include`s spelled several ways, commands only some servers
//! have).
//!
//! Each case comes from proptest strategies drawn with its own ChaCha `TestRng`, seeded by
//! the run's seed and the case's index: proptest promises the same values for the same
//! algorithm and seed on every system and version, and a case can be drawn alone
//! (`LOCKSCRIPT_EDGES_ONLY`) to reproduce it. There is no shrinking: one evaluation is a
//! cargo build and a run on a server, so the failure message prints the case instead.

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::model::{
    Case, Elem, FLOOR_COMMANDS, File, FloorUse, Line, LineKind, Options, Param, Script, Shape, Ty,
    Val,
};
use super::switches::Switches;

/// Draws the case `index` of the run `seed`, then takes out the input classes switched
/// off (after drawing, so every other part of the case stays the same).
pub fn case(seed: u64, index: usize, switches: &Switches) -> Case {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&(index as u64).to_le_bytes());
    key[16..].copy_from_slice(b"lockscript-edges");
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &key);
    let mut draw = Draw(TestRunner::new_with_rng(Config::default(), rng));
    let mut case = draw.case(index);
    switches.apply(&mut case);
    case
}

/// A runner whose strategies give one value each.
struct Draw(TestRunner);

/// Names that collide with what the expansion and the runtime use, raw identifiers,
/// and plain ones.
const NAMES: &[&str] = &[
    "invocation",
    "__LOCK_SCRIPT",
    "__LOCK_SCRIPT_REGISTERED",
    "script",
    "cmd",
    "keys",
    "args",
    "conn",
    "guard",
    "Guard",
    "krate",
    "script_warning",
    "lock_script",
    "linkme",
    "parameter",
    "reply",
    "R",
    "r#type",
    "r#match",
    "r#fn",
    "r#loop",
    "clé",
    "_x",
    "key",
    "token",
    "ttl",
    "k",
    "a",
];

const FUNCTIONS: &[&str] = &[
    "f",
    "script",
    "invoke",
    "r#match",
    "load",
    "keys",
    "invocation",
    "lock_script",
    "Script",
];

const TEXTS: &[&str] = &[
    "",
    "a",
    "{tag}",
    "lock:{orders}",
    "KEYS[1]",
    "--",
    "with space",
    "é",
    "😀",
    "\u{FFFD}",
    "\u{FEFF}",
    "line\nbreak",
    "\r\n",
    "\0",
    "nil",
    "0",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
];

const SHEBANGS: &[&str] = &[
    "#!lua",
    "#!lua flags=no-writes",
    "#!lua flags=allow-oom",
    "#!lua flags=no-writes,allow-stale",
    "#!lua   flags=allow-cross-slot-keys,no-cluster  ",
    "#!lua flags=",
    "#!lua\tflags=no-writes",
    // An empty flag: every server refuses these ("Unexpected flag in script shebang").
    "#!lua flags=no-writes,",
    "#!lua flags=,allow-oom",
    "#!lua flags=no-writes,,allow-stale",
];

/// Why every server refuses a script with an empty shebang flag.
pub const EMPTY_FLAG: &str = "empty-shebang-flag";

/// Why every server refuses a script that starts with a byte order mark.
pub const LEADING_BOM: &str = "leading-bom";

/// The bytes a script's strings and comments are made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Palette {
    Ascii,
    Utf8,
    Any,
}

impl Draw {
    fn get<S: Strategy>(&mut self, strategy: S) -> S::Value {
        strategy
            .new_tree(&mut self.0)
            .unwrap_or_else(|e| panic!("drawing a value: {e}"))
            .current()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.get(proptest::bool::weighted(p))
    }

    fn pick<T: Clone + std::fmt::Debug + 'static>(&mut self, items: &[T]) -> T {
        self.get(select(items.to_vec()))
    }

    fn count(&mut self, range: std::ops::RangeInclusive<usize>) -> usize {
        self.get(range)
    }

    /// A parameter named `name`: a key or an argument, single or variadic, with values.
    fn param(&mut self, name: &str, key: bool, variadic: bool) -> Param {
        let ty = if variadic {
            let elem = self.get(prop_oneof![
                3 => Just(Elem::Str),
                2 => Just(Elem::String),
                1 => Just(Elem::VecU8),
                1 => Just(Elem::ByteSlice),
                2 => Just(Elem::I64),
                2 => Just(Elem::OptStr),
                2 => Just(Elem::Pair),
            ]);
            let shape = self.get(prop_oneof![
                3 => Just(Shape::Slice),
                1 => Just(Shape::Vec),
                1 => Just(Shape::Array),
            ]);
            Ty::Plain(elem, shape)
        } else {
            self.get(prop_oneof![
                8 => Just(Ty::Plain(Elem::Str, Shape::One)),
                3 => Just(Ty::Plain(Elem::String, Shape::One)),
                3 => Just(Ty::Plain(Elem::VecU8, Shape::One)),
                3 => Just(Ty::Plain(Elem::ByteSlice, Shape::One)),
                4 => Just(Ty::Plain(Elem::I64, Shape::One)),
                2 => Just(Ty::Plain(Elem::OptStr, Shape::One)),
                1 => Just(Ty::Plain(Elem::Pair, Shape::One)),
                1 => Just(Ty::Generic),
                1 => Just(Ty::Impl),
            ])
        };
        let n = if variadic { self.count(0..=4) } else { 1 };
        let values = (0..n).map(|_| self.value(ty, variadic)).collect();
        Param {
            name: name.to_owned(),
            key,
            ty,
            values,
            mutable: self.chance(0.05),
        }
    }

    /// Up to three single keys and a variadic one, the same for arguments, interleaved
    /// at random (each side in its own order), with distinct names from [`NAMES`].
    fn params(&mut self) -> Vec<Param> {
        let names = self.get(Just(NAMES.to_vec()).prop_shuffle());
        let mut names = names.into_iter();
        let mut name = move || names.next().expect("more names than parameters");
        let mut keys: Vec<Param> = (0..self.count(0..=3))
            .map(|_| self.param(name(), true, false))
            .collect();
        if self.chance(0.4) {
            keys.push(self.param(name(), true, true));
        }
        let mut args: Vec<Param> = (0..self.count(0..=3))
            .map(|_| self.param(name(), false, false))
            .collect();
        if self.chance(0.4) {
            args.push(self.param(name(), false, true));
        }
        let mut params = Vec::with_capacity(keys.len() + args.len());
        let (mut keys, mut args) = (keys.into_iter().peekable(), args.into_iter().peekable());
        while keys.peek().is_some() || args.peek().is_some() {
            let take_key = match (keys.peek(), args.peek()) {
                (Some(_), None) => true,
                (None, _) => false,
                _ => self.chance(0.5),
            };
            params.extend(if take_key { keys.next() } else { args.next() });
        }
        params
    }

    fn case(&mut self, index: usize) -> Case {
        let params = self.params();
        let mut case = Case {
            index,
            func: if self.chance(0.3) {
                self.pick(FUNCTIONS).to_owned()
            } else {
                format!("f{index}")
            },
            vis: self.pick(&["", "pub ", "pub(crate) ", "pub(super) "]),
            attrs: [
                "/// A generated declaration.",
                "#[inline]",
                "#[must_use]",
                "#[allow(clippy::too_many_arguments)]",
                "#[cfg_attr(test, allow(dead_code))]",
            ]
            .into_iter()
            .filter(|_| self.chance(0.2))
            .collect(),
            params,
            lifetime: self.chance(0.15),
            ret: self.pick(&["redis::Value", "::redis::Value"]),
            options: Options::default(),
            script: Script {
                files: Vec::new(),
                flags: None,
                floor: None,
                refused: None,
            },
        };
        case.script = self.script(&case);
        case.options = self.options(&case);
        case
    }

    fn text(&mut self) -> String {
        let ch = prop_oneof![
            4 => proptest::char::range('a', 'z'),
            1 => select(vec![' ', '{', '}', ':', '"', '\\', '\n', '\r', '\t', '\0', 'é', '😀',
                             '\u{FFFD}', '\u{FEFF}', '\u{7f}']),
        ];
        self.get(prop_oneof![
            1 => select(TEXTS).prop_map(str::to_owned),
            1 => proptest::collection::vec(ch, 0..6).prop_map(String::from_iter),
        ])
    }

    fn value(&mut self, ty: Ty, variadic: bool) -> Val {
        let elem = match ty {
            Ty::Plain(elem, _) => elem,
            Ty::Generic => Elem::Str,
            Ty::Impl => Elem::I64,
        };
        match elem {
            Elem::Str | Elem::String => Val::Text(self.text()),
            Elem::VecU8 | Elem::ByteSlice => Val::Bytes(self.get(prop_oneof![
                select(vec![
                    b"".to_vec(),
                    b"\xff".to_vec(),
                    b"\x00".to_vec(),
                    b"\xc3".to_vec(),
                    b"\xef\xbf\xbd".to_vec(),
                    b"\r\n".to_vec(),
                ]),
                proptest::collection::vec(any::<u8>(), 0..8),
            ])),
            Elem::I64 => Val::Int(self.get(prop_oneof![
                select(vec![0, -1, 1, i64::MIN, i64::MAX]),
                -1000..1000i64,
                any::<i64>(),
            ])),
            Elem::OptStr => {
                // A single `None` is refused as an Argument error: rarer than a `Some`.
                let some = if variadic { 0.6 } else { 0.85 };
                let text = self.text();
                Val::Opt(self.chance(some).then_some(text))
            }
            Elem::Pair => Val::Pair(self.text(), self.text()),
        }
    }

    fn options(&mut self, case: &Case) -> Options {
        let pin = self.chance(0.25).then(|| self.chance(0.3));
        // `requires` names only servers that run the script.
        let requires = self.chance(0.2).then(|| {
            let floor = case.script.floor.map(|f| f.command);
            let redis_needs = match floor {
                Some(c) => c.redis,
                None => Some((0, 0)),
            }
            .map(|need| {
                if case.script.flags.is_some() {
                    need.max((7, 0))
                } else {
                    need
                }
            });
            let valkey_needs = floor.map_or(Some((7, 2)), |c| c.valkey);
            let mut named = Vec::new();
            if let Some(need) = redis_needs
                && self.chance(0.7)
            {
                let choices: Vec<(u32, u32)> = [(7, 0), (7, 4), (8, 0), (8, 2)]
                    .into_iter()
                    .filter(|v| *v >= need)
                    .collect();
                if !choices.is_empty() {
                    let (major, minor) = self.pick(&choices);
                    named.push(format!(
                        "{} {major}.{minor}",
                        self.pick(&["redis", "Redis"])
                    ));
                }
            }
            if let Some(need) = valkey_needs
                && self.chance(0.6)
            {
                let choices: Vec<(u32, u32)> = [(7, 2), (8, 0), (9, 0), (9, 1)]
                    .into_iter()
                    .filter(|v| *v >= need)
                    .collect();
                if !choices.is_empty() {
                    let (major, minor) = self.pick(&choices);
                    named.push(format!("valkey {major}.{minor}"));
                }
            }
            if self.chance(0.5) {
                named.reverse();
            }
            named.join(", ")
        });
        let requires = requires.filter(|r| !r.is_empty());
        let renamed = self.chance(0.15);
        let order = self.get(Just(vec![0, 1, 2]).prop_shuffle());
        Options {
            pin,
            requires,
            renamed,
            order,
            trailing_comma: self.chance(0.2),
        }
    }

    /// The bytes of one string piece or comment, from the case's palette.
    fn bytes(&mut self, palette: Palette, max: usize) -> Vec<u8> {
        let ascii = (0x20u8..0x7f).prop_map(|b| vec![b]);
        let utf8 = select(vec![
            "é".as_bytes().to_vec(),
            "€".as_bytes().to_vec(),
            "😀".as_bytes().to_vec(),
            "\u{FFFD}".as_bytes().to_vec(),
            "\u{FEFF}".as_bytes().to_vec(),
            "\u{2028}".as_bytes().to_vec(),
            b"\t".to_vec(),
        ]);
        let invalid = select(vec![
            vec![0x80],
            vec![0xbf],
            vec![0xc0],
            vec![0xc3],
            vec![0xe2, 0x82],
            vec![0xed, 0xa0, 0x80],
            vec![0xf4, 0x90, 0x80, 0x80],
            vec![0xfe],
            vec![0xff],
            vec![0xc0, 0xaf],
        ]);
        let control = select(vec![
            vec![0x00],
            vec![0x01],
            vec![0x0b],
            vec![0x0c],
            vec![0x1b],
            vec![0x7f],
            vec![0x0d],
            vec![0x0a],
        ]);
        let atom = match palette {
            Palette::Ascii => ascii.boxed(),
            Palette::Utf8 => prop_oneof![4 => ascii, 2 => utf8].boxed(),
            Palette::Any => prop_oneof![4 => ascii, 2 => utf8, 2 => invalid, 1 => control].boxed(),
        };
        self.get(proptest::collection::vec(atom, 0..=max)).concat()
    }

    fn script(&mut self, case: &Case) -> Script {
        let palette = self.get(prop_oneof![
            4 => Just(Palette::Ascii),
            3 => Just(Palette::Utf8),
            3 => Just(Palette::Any),
        ]);
        let shebang = self.chance(0.3).then(|| self.pick(SHEBANGS));
        let flags = shebang.map(|line| {
            line.split_whitespace()
                .filter_map(|word| word.strip_prefix("flags="))
                .flat_map(|list| list.split(','))
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        });
        let read_only = flags
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == "no-writes"));
        let empty_flag = shebang.is_some_and(|line| {
            line.split_whitespace()
                .filter_map(|word| word.strip_prefix("flags="))
                .any(|list| !list.is_empty() && list.split(',').any(str::is_empty))
        });
        let floor = self.chance(0.2).then(|| {
            let choices: Vec<_> = FLOOR_COMMANDS
                .iter()
                .filter(|c| !read_only || !c.write)
                .copied()
                .collect();
            FloorUse {
                command: self.pick(&choices),
                pcall: self.chance(0.3),
            }
        });
        let includes = if self.chance(0.3) {
            self.count(1..=3)
        } else {
            0
        };
        let index = case.index;
        let mut files = vec![File {
            path: format!("c{index}.lua"),
            lines: Vec::new(),
        }];
        files.extend((0..includes).map(|j| File {
            path: format!("c{index}/i{j}.lua"),
            lines: Vec::new(),
        }));

        let leading_bom = self.chance(0.04);
        let mut lines = self.main_file(case, palette, shebang, floor, includes, &files);
        if leading_bom {
            lines[0].text.splice(0..0, "\u{FEFF}".bytes());
        }
        files[0].lines = lines;

        for j in 0..includes {
            let mut file = Draft::new(self);
            if !file.draw.chance(0.08) {
                file.body(palette, j + 1, includes, &files);
            }
            files[j + 1].lines = file.finish();
        }
        let refused = if leading_bom {
            Some(LEADING_BOM)
        } else if empty_flag {
            Some(EMPTY_FLAG)
        } else {
            None
        };
        Script {
            files,
            flags,
            floor,
            refused,
        }
    }

    /// The script's own file: a shebang, comments, the pieces and includes that make
    /// its marker, the command only some servers have, and the lines that return
    /// `{#KEYS, #ARGV, marker, KEYS..., ARGV...}` (counted, or read by fixed index when
    /// the signature has no slice for the table).
    fn main_file(
        &mut self,
        case: &Case,
        palette: Palette,
        shebang: Option<&str>,
        floor: Option<FloorUse>,
        includes: usize,
        files: &[File],
    ) -> Vec<Line> {
        let mut main = Draft::new(self);
        if let Some(line) = shebang {
            main.code(line.as_bytes().to_vec());
            // Both Redis and the macro read a shebang up to `\n`: a lone `\r` would make
            // the next line part of it.
            if let Some(last) = main.lines.last_mut()
                && last.eol == b"\r"
            {
                last.eol = b"\n";
            }
        }
        for _ in 0..main.draw.count(0..=2) {
            let comment = main.draw.comment(palette);
            main.code(comment);
        }
        main.code(b"local parts = {}".to_vec());
        main.body(palette, 0, includes, files);
        main.code(b"local marker = table.concat(parts)".to_vec());
        if let Some(floor) = floor {
            let name: String = floor
                .command
                .name
                .chars()
                .map(|c| {
                    if main.draw.chance(0.3) {
                        c.to_ascii_lowercase()
                    } else {
                        c
                    }
                })
                .collect();
            let call = if floor.pcall { "pcall" } else { "call" };
            main.code(format!("redis.{call}('{name}', {})", floor.command.args).into_bytes());
        }
        let table_lines = |draw: &mut Draw, table: &str, variadic: bool, fixed: usize| {
            let mut lines = Vec::new();
            if variadic {
                lines.push(if draw.chance(0.5) {
                    format!("for i = 1, #{table} do out[#out + 1] = {table}[i] end")
                } else {
                    format!("for _, v in ipairs({table}) do table.insert(out, v) end")
                });
            } else {
                let each: Vec<String> = (1..=fixed)
                    .map(|n| format!("out[#out + 1] = {table}[{n}]"))
                    .collect();
                if draw.chance(0.5) {
                    lines.extend(each);
                } else if !each.is_empty() {
                    lines.push(each.join("; "));
                }
            }
            lines
        };
        let fixed_keys = case.keys().filter(|p| !p.ty.variadic()).count();
        let fixed_args = case.args().filter(|p| !p.ty.variadic()).count();
        let count = |variadic: bool, table: &str, fixed: usize| {
            if variadic {
                format!("#{table}")
            } else {
                fixed.to_string()
            }
        };
        main.code(
            format!(
                "local out = {{{}, {}, marker}}",
                count(case.keys_variadic(), "KEYS", fixed_keys),
                count(case.args_variadic(), "ARGV", fixed_args)
            )
            .into_bytes(),
        );
        for line in table_lines(main.draw, "KEYS", case.keys_variadic(), fixed_keys) {
            main.code(line.into_bytes());
        }
        for line in table_lines(main.draw, "ARGV", case.args_variadic(), fixed_args) {
            main.code(line.into_bytes());
        }
        main.code(b"return out".to_vec());
        if main.draw.chance(0.3) {
            let comment = main.draw.comment(palette);
            main.code(comment);
        }
        main.finish()
    }

    fn comment(&mut self, palette: Palette) -> Vec<u8> {
        let mut text = b"-- ".to_vec();
        text.extend(
            self.bytes(palette, 8)
                .into_iter()
                .filter(|b| *b != b'\r' && *b != b'\n'),
        );
        text
    }

    /// `parts[#parts + 1] = <literal>` and the bytes the literal stands for.
    fn piece(&mut self, palette: Palette) -> (Vec<u8>, Vec<u8>) {
        let value = self.bytes(palette, 6);
        let indent = self.pick(&["", "  ", "\t"]);
        let trail = self.pick(&["", ";", " ", " ;"]);
        let (literal, value) = match self.count(0..=4) {
            0 | 1 => {
                let quote = if self.chance(0.5) { b'"' } else { b'\'' };
                let value: Vec<u8> = value
                    .into_iter()
                    .filter(|b| ![quote, b'\\', b'\r', b'\n'].contains(b))
                    .collect();
                let mut literal = vec![quote];
                literal.extend_from_slice(&value);
                literal.push(quote);
                (literal, value)
            }
            2 => {
                let mut literal = b"\"".to_vec();
                for &b in &value {
                    match b {
                        b'\n' => literal.extend_from_slice(b"\\n"),
                        b'\r' => literal.extend_from_slice(b"\\r"),
                        b'\t' => literal.extend_from_slice(b"\\t"),
                        b'"' => literal.extend_from_slice(b"\\\""),
                        b'\\' => literal.extend_from_slice(b"\\\\"),
                        0x20..=0x7e => literal.push(b),
                        _ => literal.extend_from_slice(format!("\\{b:03}").as_bytes()),
                    }
                }
                literal.push(b'"');
                (literal, value)
            }
            3 => {
                let level = "=".repeat(self.count(0..=2));
                let value: Vec<u8> = value
                    .into_iter()
                    .filter(|b| ![b']', b'\r', b'\n'].contains(b))
                    .collect();
                let mut literal = format!("[{level}[").into_bytes();
                literal.extend_from_slice(&value);
                literal.extend_from_slice(format!("]{level}]").as_bytes());
                (literal, value)
            }
            _ => {
                let clean = |v: Vec<u8>| -> Vec<u8> {
                    v.into_iter()
                        .filter(|b| ![b'"', b'\\', b'\r', b'\n'].contains(b))
                        .collect()
                };
                let (a, b) = (clean(value), clean(self.bytes(palette, 3)));
                let mut literal = b"\"".to_vec();
                literal.extend_from_slice(&a);
                literal.extend_from_slice(b"\" .. \"");
                literal.extend_from_slice(&b);
                literal.push(b'"');
                (literal, [a, b].concat())
            }
        };
        let mut text = indent.as_bytes().to_vec();
        text.extend_from_slice(b"parts[#parts + 1] = ");
        text.extend_from_slice(&literal);
        text.extend_from_slice(trail.as_bytes());
        (text, value)
    }

    /// An `@include` line of `target` (a path relative to `scripts/`) in the file at
    /// `from`, spelled one of the ways the expansion accepts.
    fn include(&mut self, from: &str, target: &str) -> Vec<u8> {
        let stem = target.trim_end_matches(".lua");
        let in_subfolder = from.contains('/');
        let relative = if in_subfolder {
            let (folder, name) = stem.split_once('/').unwrap_or(("", stem));
            self.pick(&[
                name.to_owned(),
                format!("{name}.lua"),
                format!("./{name}"),
                format!("../{folder}/{name}.lua"),
            ])
        } else {
            self.pick(&[stem.to_owned(), format!("{stem}.lua"), format!("./{stem}")])
        };
        let dashes = self.pick(&["--", "---"]);
        let gap = self.pick(&[" ", "", "  "]);
        let after = self.pick(&[" ", "\t", "  "]);
        let quote = self.pick(&["\"", "'"]);
        let trail = self.pick(&["", ";", " ", "\t;"]);
        let indent = self.pick(&["", " "]);
        format!("{indent}{dashes}{gap}@include{after}{quote}{relative}{quote}{trail}").into_bytes()
    }
}

/// The lines of one file as they are drawn: each with its end of line.
struct Draft<'d> {
    draw: &'d mut Draw,
    lines: Vec<Line>,
    /// The file's line ends: `\n`, `\r\n`, or a mix with lone `\r`s.
    style: u8,
}

impl<'d> Draft<'d> {
    fn new(draw: &'d mut Draw) -> Self {
        let style = draw.get(prop_oneof![7 => Just(0u8), 2 => Just(1u8), 2 => Just(2u8)]);
        Self {
            draw,
            lines: Vec::new(),
            style,
        }
    }

    fn eol(&mut self) -> &'static [u8] {
        match self.style {
            0 => b"\n",
            1 => b"\r\n",
            _ => self.draw.pick(&[&b"\n"[..], b"\n", b"\r\n", b"\r"]),
        }
    }

    fn push(&mut self, text: Vec<u8>, kind: LineKind) {
        let eol = self.eol();
        self.lines.push(Line { text, eol, kind });
    }

    fn code(&mut self, text: Vec<u8>) {
        self.push(text, LineKind::Code);
    }

    /// Pieces, includes of files after `own` (so there is no cycle), comments and blank
    /// lines, in any order.
    fn body(&mut self, palette: Palette, own: usize, includes: usize, files: &[File]) {
        for _ in 0..self.draw.count(0..=5) {
            match self.draw.count(0..=9) {
                0..=4 => {
                    let (text, value) = self.draw.piece(palette);
                    self.push(text, LineKind::Piece(value));
                }
                5..=7 if own < includes => {
                    let target = self.draw.count(own + 1..=includes);
                    let text = self.draw.include(&files[own].path, &files[target].path);
                    self.push(text, LineKind::Include(target));
                }
                8 => {
                    let comment = self.draw.comment(palette);
                    self.code(comment);
                }
                _ => {
                    let blank = self.draw.pick(&["", " ", "\t"]);
                    self.code(blank.as_bytes().to_vec());
                }
            }
        }
    }

    /// The lines; the last one may have no end of line.
    fn finish(mut self) -> Vec<Line> {
        if self.draw.chance(0.2)
            && let Some(last) = self.lines.last_mut()
        {
            last.eol = b"";
        }
        self.lines
    }
}
