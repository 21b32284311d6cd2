//! Static analysis of one Redis Lua script, independent of any Rust signature.
//!
//! Parses the source as Lua 5.1 (the dialect Redis embeds) with `full_moon`, reads the
//! `#!lua` shebang the way the servers do ([`crate::shebang`]), and scans the tokens for
//! the three things the macro checks against the Rust side: the highest literal
//! `KEYS[n]` and `ARGV[n]`, and every `redis.call` / `redis.pcall` whose command name is a
//! string literal: whether the server has it and takes it from a script, its arity, and
//! a key written into the script where the command takes a key (every key must come in
//! `KEYS`).
//!
//! What a server refuses can depend on the server (a global only some define, a shebang
//! Redis 6.2 cannot read): such problems are about [`Analysis::servers`], the servers of
//! the matrix the script runs on as far as its shebang and commands go ([`analyze`]), or
//! the servers asked about ([`analyze_on`]).
//!
//! This module knows nothing about `proc_macro`: it returns plain data with 1-based
//! line/column positions, so the same analysis can serve a command-line auditor.

use full_moon::ast::LuaVersion;
use full_moon::tokenizer::{Lexer, LexerResult, Symbol, Token, TokenType};

use crate::commands::{self, Argument, Server, Servers};
use crate::problem::closest;
pub use crate::problem::{Position, Problem};
pub use crate::shebang::KNOWN_FLAGS;
use crate::shebang::{self, Shebang};

/// How a script uses `KEYS` or `ARGV`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The highest literal index, `KEYS[3]` gives 3; 0 when never indexed literally.
    pub highest: usize,
    /// Where that highest index first appears.
    pub highest_at: Option<Position>,
    /// The table is also used in a way that needs no fixed count (`#KEYS`, `KEYS[i]`,
    /// `unpack(KEYS)`): a variadic Rust parameter fits it.
    pub dynamic: bool,
    /// The first use that reads the table by count (`#KEYS`, `ipairs(KEYS)`,
    /// `unpack(ARGV)`, the table passed whole), as written: such a script takes any
    /// number of entries, so its Rust function needs a slice parameter for the table.
    pub counted: Option<(Position, String)>,
    /// The first read by a computed index (`KEYS[i]`).
    pub computed_at: Option<Position>,
}

/// A `redis.call` / `redis.pcall` with a literal command name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandUse {
    /// The name as written (case preserved); `PARENT|SUB` for a known subcommand.
    pub name: String,
    /// Where the name literal is.
    pub at: Position,
    /// How many arguments the call passes, the name included (and the subcommand).
    pub given: usize,
    /// The last argument may expand to several values (`unpack(t)`, `...`, a call's
    /// results), so `given` is a floor.
    pub open: bool,
    /// The literal second argument, for a command with subcommands.
    pub sub: Option<(String, Position)>,
    /// Every argument as written, the name first: what
    /// [`Command::keys_in`](commands::Command::keys_in) reads the keys of the call from.
    pub arguments: Vec<Written>,
}

/// One argument of a call as written, and where it begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// A literal, or computed.
    pub value: Argument,
    /// Where it begins.
    pub at: Position,
}

/// Everything the checks need to know about one script.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    /// `KEYS` usage.
    pub keys: Usage,
    /// `ARGV` usage.
    pub argv: Usage,
    /// The script opens with a `#!lua` shebang (which changes Redis's defaults).
    pub shebang: bool,
    /// The flags listed in the shebang, in order.
    pub flags: Vec<String>,
    /// Literal command names the script calls.
    pub commands: Vec<CommandUse>,
    /// Calls whose command is not a literal (`rcall(ARGV[10], ...)`): not checked.
    pub unchecked: Vec<Position>,
    /// Where `redis.call` / `redis.pcall` (or `redis`) is used as a value the scan does
    /// not follow (`run(redis.call)`, `t[1] = redis.call`, `rcall{...}`): calls through
    /// it are not seen, so what the script calls can't be told in full.
    pub untracked: Vec<Position>,
    /// Every problem found, in file order within each kind: what the server would
    /// refuse. The macro fails the build on these; `lockscript audit` exits with 1.
    pub problems: Vec<Problem>,
    /// What only some servers of the test matrix would refuse: a command that some of
    /// them lack ([`commands::Command::availability`]). The macro and
    /// `lockscript audit` report these without failing.
    pub warnings: Vec<Problem>,
    /// The source parsed as Lua 5.1; when false, the usage counts are not meaningful.
    pub parsed: bool,
    /// The servers of the matrix ([`commands::SERVERS`]) the problems are about: those
    /// that read the script's shebang and have every command it calls (every server
    /// when none does), or the ones [`analyze_on`] was given. A global one of them does
    /// not define, or a shebang one of them cannot read, is a problem.
    pub servers: Servers,
    /// Every `return` of the script, and its end when it can be reached without one,
    /// with the shapes its reply may have ([`crate::reply`]); empty when the script does
    /// not parse.
    pub returns: Vec<crate::reply::Return>,
}

impl Analysis {
    /// The shebang declares `no-writes`: the script may run as EVAL_RO / EVALSHA_RO.
    pub fn read_only(&self) -> bool {
        self.flags.iter().any(|f| f == "no-writes")
    }

    /// Whether the script calls a command that writes (or counts as one in a `no-writes`
    /// script: [`commands::MAY_REPLICATE`]): `Some(true)` when one of its literal
    /// commands does, `Some(false)` when none does and every call it makes is seen with
    /// a literal command the table knows (a subcommand computed only where none of the
    /// container's subcommands writes), `None` when that can't be told: a computed
    /// command, a module's or unknown one, a call through something the scan does not
    /// follow, a script that does not parse.
    ///
    /// ```
    /// use lockscript_audit::lua::analyze;
    ///
    /// assert_eq!(analyze("return redis.call('GET', KEYS[1])").writes(), Some(false));
    /// assert_eq!(analyze("return redis.call('DEL', KEYS[1])").writes(), Some(true));
    /// assert_eq!(analyze("return redis.call(ARGV[1], KEYS[1])").writes(), None);
    /// ```
    pub fn writes(&self) -> Option<bool> {
        let mut known = self.parsed && self.unchecked.is_empty() && self.untracked.is_empty();
        for used in &self.commands {
            match commands::find(&used.name) {
                Some(c) if c.write => return Some(true),
                // A container whose subcommand is computed: known only when none of them
                // writes.
                Some(c) if !c.name.contains('|') && c.subcommands().next().is_some() => {
                    known &= c.subcommands().all(|s| !s.write);
                }
                Some(_) => {}
                None => known = false,
            }
        }
        known.then_some(false)
    }
}

/// Analyses a script's source, for the servers of the matrix it runs on as far as its
/// shebang and commands go ([`Analysis::servers`]).
///
/// ```
/// use lockscript_audit::lua::analyze;
///
/// // Only Redis 6.2 keeps Lua's `print`: the script runs everywhere else, and fails there.
/// let analysis = analyze("print('x')\nreturn 1");
/// assert!(analysis.problems[0].message.starts_with("`print` exists on Redis 6.2."));
/// ```
pub fn analyze(source: &str) -> Analysis {
    analyze_for(source, None)
}

/// Analyses a script's source for the servers `servers` of the matrix: a problem is what
/// one of them would refuse (the macro's `requires = "..."` narrows the servers so).
///
/// ```
/// use lockscript_audit::commands::{Product, Servers};
/// use lockscript_audit::lua::{analyze, analyze_on};
///
/// let script = "return os.clock()";
/// assert!(!analyze(script).problems.is_empty()); // Redis 6.2 and 7.0 have no `os`
/// let valkey = Servers::from_fn(|s| s.product == Product::Valkey);
/// assert!(analyze_on(script, valkey).problems.is_empty());
/// ```
pub fn analyze_on(source: &str, servers: Servers) -> Analysis {
    analyze_for(source, Some(servers))
}

/// `text` with each carriage return that no line feed follows made a line feed, as Lua
/// 5.1 reads it (`llex.c`: `\r` alone ends a line, a comment included, and becomes `\n`
/// in a long string); the parser ends lines at `\n` only, so without this a `-- c\r` comment
/// would hide the code after it from every check. One byte for one: every position
/// stays where it was.
pub(crate) fn lone_cr_as_lf(text: &str) -> std::borrow::Cow<'_, str> {
    let bytes = text.as_bytes();
    let lone = |i: usize| bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n');
    if !(0..bytes.len()).any(lone) {
        return std::borrow::Cow::Borrowed(text);
    }
    let out: Vec<u8> = (0..bytes.len())
        .map(|i| if lone(i) { b'\n' } else { bytes[i] })
        .collect();
    // Only an ASCII byte was replaced by another: still UTF-8.
    std::borrow::Cow::Owned(String::from_utf8(out).unwrap_or_else(|_| text.to_owned()))
}

fn analyze_for(source: &str, servers: Option<Servers>) -> Analysis {
    let mut analysis = Analysis::default();
    let shebang = Shebang::read(source);
    if let Some(shebang) = &shebang {
        analysis.shebang = true;
        analysis.flags.clone_from(&shebang.flags);
    }
    let body = shebang::as_comment(source);
    let body = lone_cr_as_lf(&body);
    let shebang_problems = |analysis: &Analysis| {
        shebang
            .as_ref()
            .map(|s| s.problems(analysis.servers))
            .unwrap_or_default()
    };

    if source.starts_with('\u{feff}') {
        // Lua reads the three bytes as an unexpected character, which shows as nothing.
        analysis.servers = servers.unwrap_or_else(|| runs_on(&analysis));
        analysis.problems.push(Problem {
            at: Position { line: 1, column: 1 },
            message: "the file starts with a UTF-8 byte order mark (bytes EF BB BF), which \
                      Lua refuses as an unexpected character: save the file without it"
                .to_owned(),
        });
        return analysis;
    }
    let parsed = full_moon::parse_fallible(&body, LuaVersion::lua51());
    if !parsed.errors().is_empty() {
        analysis.servers = servers.unwrap_or_else(|| runs_on(&analysis));
        analysis.problems = shebang_problems(&analysis);
        for error in parsed.errors() {
            let (start, _) = error.range();
            analysis.problems.push(Problem {
                at: Position {
                    line: start.line(),
                    column: start.character(),
                },
                message: format!("Lua syntax error: {}", error.error_message()),
            });
        }
        // A partial tree has phantom tokens; linting it would report noise.
        return analysis;
    }

    analysis.parsed = true;
    // The parse succeeded, so lexing succeeds too; the scan wants the flat token list.
    if let LexerResult::Ok(all) = Lexer::new(&body, LuaVersion::lua51()).collect() {
        let tokens: Vec<&Token> = all.iter().filter(|t| !t.token_type().is_trivia()).collect();
        scan(&tokens, &mut analysis);
    }
    // The servers follow from the commands; the problems keep their order: the shebang,
    // the names, then the calls.
    analysis.servers = servers.unwrap_or_else(|| runs_on(&analysis));
    let first = shebang_problems(&analysis);
    let calls = std::mem::replace(&mut analysis.problems, first);
    crate::scope::check(
        parsed.ast().nodes(),
        analysis.servers,
        &mut analysis.problems,
    );
    analysis.returns = crate::reply::returns(
        parsed.ast().nodes(),
        body.lines().count(),
        body.contains("setresp"),
    );
    analysis.problems.extend(calls);
    analysis
}

/// The servers of the matrix that read the script's shebang (when it has one) and have
/// every command it calls; every server when none does (the warnings say why).
fn runs_on(analysis: &Analysis) -> Servers {
    let mut on = Servers::all();
    if analysis.shebang {
        on = on.and(Servers::from_fn(Server::reads_shebang));
    }
    for used in &analysis.commands {
        if let Some(c) = commands::find(&used.name) {
            on = on.and(c.on);
        }
    }
    if on.is_empty() { Servers::all() } else { on }
}

fn position(token: &Token) -> Position {
    let p = token.start_position();
    Position {
        line: p.line(),
        column: p.character(),
    }
}

fn is_symbol(token: Option<&&Token>, symbol: Symbol) -> bool {
    matches!(token.map(|t| t.token_type()), Some(TokenType::Symbol { symbol: s }) if *s == symbol)
}

fn identifier<'a>(token: Option<&&'a Token>) -> Option<&'a str> {
    match token.map(|t| t.token_type()) {
        Some(TokenType::Identifier { identifier }) => Some(identifier.as_str()),
        _ => None,
    }
}

fn string_literal<'a>(token: Option<&&'a Token>) -> Option<&'a str> {
    match token.map(|t| t.token_type()) {
        Some(TokenType::StringLiteral { literal, .. }) => Some(literal.as_str()),
        _ => None,
    }
}

fn scan(tokens: &[&Token], analysis: &mut Analysis) {
    let aliases = Aliases::find(tokens);
    for (i, token) in tokens.iter().enumerate() {
        let Some(name) = identifier(Some(token)) else {
            continue;
        };
        let before = i.checked_sub(1).and_then(|j| tokens.get(j));
        // `x.KEYS`, `x:KEYS` and `{KEYS = 1}` are fields, not the global.
        if is_symbol(before, Symbol::Dot)
            || is_symbol(before, Symbol::Colon)
            || is_symbol(tokens.get(i + 1), Symbol::Equal)
        {
            continue;
        }
        match name {
            "KEYS" | "ARGV" => {
                let usage = if name == "KEYS" {
                    &mut analysis.keys
                } else {
                    &mut analysis.argv
                };
                index_use(name, tokens, i, usage, &mut analysis.problems);
            }
            "pcall" | "xpcall" if is_symbol(tokens.get(i + 1), Symbol::LeftParen) => {
                // `pcall(redis.call, 'GET', k)`: the command follows the callee.
                if let Some(after) = aliases.callee(tokens, i + 2)
                    && is_symbol(tokens.get(after), Symbol::Comma)
                {
                    command_use(tokens, after, analysis);
                }
            }
            _ => {
                if let Some(args) = aliases.callee(tokens, i)
                    && !is_pcall_argument(tokens, i)
                {
                    if is_called(tokens, args) {
                        command_use(tokens, args, analysis);
                    } else if !aliases.assigns(tokens, i) {
                        analysis.untracked.push(position(token));
                    }
                } else if aliases.modules.iter().any(|m| m == name)
                    && !is_symbol(tokens.get(i + 1), Symbol::Dot)
                    && !aliases.assigns(tokens, i)
                {
                    // `redis` itself passed on or indexed (`redis['call']`).
                    analysis.untracked.push(position(token));
                }
            }
        }
    }
    lint_commands(analysis);
}

/// The arguments at `args` are a call's the lint reads: `(`, a string
/// (`redis.call 'PING'`), or, after a `pcall(callee`, the `,` before the command. Not a
/// table (`rcall{...}`): its command can't be read.
fn is_called(tokens: &[&Token], args: usize) -> bool {
    is_symbol(tokens.get(args), Symbol::LeftParen)
        || is_symbol(tokens.get(args), Symbol::Comma)
        || string_literal(tokens.get(args)).is_some()
}

/// The names a script gives `redis.call` / `redis.pcall` or `redis` itself, as large
/// scripts do (`local rcall = redis.call`, `local r = redis`, `M.call = redis.pcall`), so
/// calls through them are checked like direct ones; and Valkey's own name for `redis`,
/// `server` (`server.call`). A name that is also assigned anything else is dropped: only
/// what resolves for certain is followed.
struct Aliases {
    /// Stand for `redis.call` / `redis.pcall`: `rcall`, or `M.call` for a field.
    calls: Vec<String>,
    /// Stand for `redis`: `redis` itself, `server` (Valkey), and aliases of `redis`.
    modules: Vec<String>,
}

impl Aliases {
    fn find(tokens: &[&Token]) -> Self {
        let mut calls = Vec::new();
        let mut modules = vec!["redis".to_owned(), "server".to_owned()];
        let mut other = Vec::new();
        for i in 0..tokens.len() {
            if !is_symbol(tokens.get(i), Symbol::Equal) {
                continue;
            }
            // The assigned name: `x =` or `t.x =`, not a field of a table constructor
            // or a second name of a list.
            let Some(last) = i.checked_sub(1).and_then(|j| identifier(tokens.get(j))) else {
                continue;
            };
            let (target, start) = match i.checked_sub(3) {
                Some(j) if is_symbol(tokens.get(j + 1), Symbol::Dot) => {
                    match identifier(tokens.get(j)) {
                        Some(table) => (format!("{table}.{last}"), j),
                        None => continue,
                    }
                }
                _ => (last.to_owned(), i - 1),
            };
            if start
                .checked_sub(1)
                .is_some_and(|j| is_symbol(tokens.get(j), Symbol::Comma))
            {
                other.push(target);
                continue;
            }
            // The value: `redis`, or `redis.call` / `redis.pcall`, and nothing after it
            // that would make it a call or an expression.
            let value = identifier(tokens.get(i + 1));
            let ends = |k: usize| {
                !is_symbol(tokens.get(k), Symbol::LeftParen)
                    && !is_symbol(tokens.get(k), Symbol::Dot)
                    && !is_symbol(tokens.get(k), Symbol::Colon)
                    && !is_symbol(tokens.get(k), Symbol::LeftBracket)
                    && !matches!(
                        tokens.get(k).map(|t| t.token_type()),
                        Some(
                            TokenType::StringLiteral { .. }
                                | TokenType::Symbol {
                                    symbol: Symbol::LeftBrace
                                }
                        )
                    )
                    && !is_symbol(tokens.get(k), Symbol::Comma)
            };
            if value.is_some_and(|v| modules.iter().any(|m| m == v))
                && is_symbol(tokens.get(i + 2), Symbol::Dot)
                && matches!(identifier(tokens.get(i + 3)), Some("call" | "pcall"))
                && ends(i + 4)
            {
                calls.push(target);
            } else if value == Some("redis") && ends(i + 2) {
                modules.push(target);
            } else {
                other.push(target);
            }
        }
        calls.retain(|c| !other.contains(c));
        modules.retain(|m| m == "redis" || !other.contains(m));
        let mut aliases = Self { calls, modules };
        aliases.find_wrappers(tokens);
        aliases
    }

    /// Functions that only pass their arguments on to `redis.call` (or an alias):
    /// `local function rc(...) return redis.call(...) end`, `function M.call(cmd, ...)
    /// return rcall(cmd, ...) end`. Calls through them are checked like direct ones.
    fn find_wrappers(&mut self, tokens: &[&Token]) {
        for i in 0..tokens.len() {
            if !matches!(
                tokens[i].token_type(),
                TokenType::Symbol {
                    symbol: Symbol::Function
                }
            ) {
                continue;
            }
            // The name: `name` or `table.name`, then `(`.
            let (name, open) = match (
                identifier(tokens.get(i + 1)),
                is_symbol(tokens.get(i + 2), Symbol::Dot),
            ) {
                (Some(table), true) => match identifier(tokens.get(i + 3)) {
                    Some(field) => (format!("{table}.{field}"), i + 4),
                    None => continue,
                },
                (Some(name), false) => (name.to_owned(), i + 2),
                (None, _) => continue,
            };
            if !is_symbol(tokens.get(open), Symbol::LeftParen) {
                continue;
            }
            let Some(close) =
                (open..tokens.len()).find(|&k| is_symbol(tokens.get(k), Symbol::RightParen))
            else {
                continue;
            };
            let params = &tokens[open + 1..close];
            if params.is_empty()
                || !matches!(
                    tokens.get(close + 1).map(|t| t.token_type()),
                    Some(TokenType::Symbol {
                        symbol: Symbol::Return
                    })
                )
            {
                continue;
            }
            let Some(args) = self.callee(tokens, close + 2) else {
                continue;
            };
            // `return callee(<the same parameters>) end`
            let same = params.iter().enumerate().all(|(k, p)| {
                tokens
                    .get(args + 1 + k)
                    .is_some_and(|t| t.token_type() == p.token_type())
            });
            let end = args + 1 + params.len();
            if is_symbol(tokens.get(args), Symbol::LeftParen)
                && same
                && is_symbol(tokens.get(end), Symbol::RightParen)
                && matches!(
                    tokens.get(end + 1).map(|t| t.token_type()),
                    Some(TokenType::Symbol {
                        symbol: Symbol::End
                    })
                )
                && !self.calls.contains(&name)
            {
                self.calls.push(name);
            }
        }
    }

    /// The expression at `i` (`redis.call`, `redis`) is the whole value given to one of
    /// the aliases: `local rcall = redis.call`, `M.call = redis.pcall`, `local r = redis`.
    fn assigns(&self, tokens: &[&Token], i: usize) -> bool {
        let Some(eq) = i.checked_sub(1) else {
            return false;
        };
        if !is_symbol(tokens.get(eq), Symbol::Equal) {
            return false;
        }
        let Some(last) = eq.checked_sub(1).and_then(|j| identifier(tokens.get(j))) else {
            return false;
        };
        let target = match eq.checked_sub(3) {
            Some(j) if is_symbol(tokens.get(j + 1), Symbol::Dot) => {
                identifier(tokens.get(j)).map(|table| format!("{table}.{last}"))
            }
            _ => Some(last.to_owned()),
        };
        target.is_some_and(|t| self.calls.contains(&t) || self.modules.contains(&t))
    }

    /// Where the arguments start when the identifier at `i` begins a call of
    /// `redis.call` / `redis.pcall` under any of its names.
    fn callee(&self, tokens: &[&Token], i: usize) -> Option<usize> {
        let name = identifier(tokens.get(i))?;
        let field = if is_symbol(tokens.get(i + 1), Symbol::Dot) {
            identifier(tokens.get(i + 2))
        } else {
            None
        };
        if let Some(field) = field {
            if matches!(field, "call" | "pcall") && self.modules.iter().any(|m| m == name) {
                return Some(i + 3);
            }
            let dotted = format!("{name}.{field}");
            if self.calls.contains(&dotted) {
                return Some(i + 3);
            }
            return None;
        }
        self.calls.iter().any(|c| c == name).then_some(i + 1)
    }
}

/// Records `KEYS[<n>]`, or marks the table as used dynamically.
fn index_use(
    table: &str,
    tokens: &[&Token],
    i: usize,
    usage: &mut Usage,
    problems: &mut Vec<Problem>,
) {
    let literal = if is_symbol(tokens.get(i + 1), Symbol::LeftBracket)
        && is_symbol(tokens.get(i + 3), Symbol::RightBracket)
    {
        match tokens.get(i + 2).map(|t| t.token_type()) {
            Some(TokenType::Number { text }) => Some((text.as_str(), position(tokens[i]))),
            _ => None,
        }
    } else {
        None
    };
    let Some((text, at)) = literal else {
        usage.dynamic = true;
        let before = i.checked_sub(1).and_then(|j| tokens.get(j));
        if is_symbol(tokens.get(i + 1), Symbol::LeftBracket) && !is_symbol(before, Symbol::Hash) {
            usage.computed_at.get_or_insert(position(tokens[i]));
        } else if usage.counted.is_none() {
            let how = if is_symbol(before, Symbol::Hash) {
                format!("#{table}")
            } else if is_symbol(before, Symbol::LeftParen)
                && let Some(f) = i.checked_sub(2).and_then(|j| identifier(tokens.get(j)))
            {
                format!("{f}({table})")
            } else {
                format!("{table} as a whole")
            };
            let at = before
                .filter(|_| how.starts_with('#'))
                .map_or_else(|| position(tokens[i]), |b| position(b));
            usage.counted = Some((at, how));
        }
        return;
    };
    match text.parse::<usize>() {
        Ok(0) => problems.push(Problem {
            at,
            message: format!("{table}[0] is always nil: Lua tables start at 1"),
        }),
        Ok(n) => {
            if n > usage.highest {
                usage.highest = n;
                usage.highest_at = Some(at);
            }
        }
        Err(_) => usage.dynamic = true,
    }
}

/// The callee at `i` is the first argument of `pcall(...)`: its command comes after it,
/// and is read from there.
fn is_pcall_argument(tokens: &[&Token], i: usize) -> bool {
    i.checked_sub(2).is_some_and(|j| {
        matches!(identifier(tokens.get(j)), Some("pcall" | "xpcall"))
            && is_symbol(tokens.get(j + 1), Symbol::LeftParen)
    })
}

/// The arguments of a call whose list starts at `open` (a `(`): the index of the first
/// token of each, and the index of the closing `)`.
fn arguments(tokens: &[&Token], open: usize) -> (Vec<usize>, usize) {
    let mut starts = Vec::new();
    let mut depth = 0usize;
    let mut k = open + 1;
    if is_symbol(tokens.get(k), Symbol::RightParen) {
        return (starts, k);
    }
    starts.push(k);
    while let Some(t) = tokens.get(k) {
        match t.token_type() {
            TokenType::Symbol {
                symbol: Symbol::LeftParen | Symbol::LeftBracket | Symbol::LeftBrace,
            } => depth += 1,
            TokenType::Symbol {
                symbol: Symbol::RightParen | Symbol::RightBracket | Symbol::RightBrace,
            } => {
                if depth == 0 {
                    return (starts, k);
                }
                depth -= 1;
            }
            TokenType::Symbol {
                symbol: Symbol::Comma,
            } if depth == 0 => starts.push(k + 1),
            // A function body inside the arguments has its own `end`: keep counting depth
            // by brackets only; `function` bodies hold no top-level commas of the call.
            _ => {}
        }
        k += 1;
    }
    (starts, k)
}

/// Records `redis.call("NAME", ...)`, `redis.pcall('NAME', ...)` and `redis.call "NAME"`
/// (or the same through an alias or wrapper), whose arguments start at token `args`: a
/// `(`, a string, or, after a `pcall(callee`, the `,` before the command.
fn command_use(tokens: &[&Token], args: usize, analysis: &mut Analysis) {
    let mut starts = vec![args];
    let (name_at, given, open) = if is_symbol(tokens.get(args), Symbol::LeftParen)
        || is_symbol(tokens.get(args), Symbol::Comma)
    {
        let close;
        (starts, close) = arguments(tokens, args);
        let Some(&first) = starts.first() else {
            return;
        };
        // The last argument expands when it is `...` or ends in a call's `)`.
        let last_end = close.saturating_sub(1);
        let open = starts.last().is_some_and(|&last| {
            matches!(
                tokens.get(last).map(|t| t.token_type()),
                Some(TokenType::Symbol {
                    symbol: Symbol::Ellipsis
                })
            ) || (is_symbol(tokens.get(last_end), Symbol::RightParen) && last_end > last)
        });
        (first, starts.len(), open)
    } else if string_literal(tokens.get(args)).is_some() {
        (args, 1, false)
    } else {
        // Not a call (`local rcall = redis.call`), or called with a table.
        return;
    };
    let Some(name) = string_literal(tokens.get(name_at)) else {
        analysis.unchecked.push(position(tokens[name_at]));
        return;
    };
    let single = |k: usize| {
        string_literal(tokens.get(k)).filter(|_| {
            is_symbol(tokens.get(k + 1), Symbol::Comma)
                || is_symbol(tokens.get(k + 1), Symbol::RightParen)
        })
    };
    let sub = if is_symbol(tokens.get(name_at + 1), Symbol::Comma) {
        single(name_at + 2).map(|s| (s.to_owned(), position(tokens[name_at + 2])))
    } else {
        None
    };
    let mut full = name.to_owned();
    // A container command (`CLIENT KILL`, `SCRIPT FLUSH`) is checked by its subcommand
    // when that is a literal too.
    if let Some((sub, _)) = &sub {
        let candidate = format!("{name}|{sub}");
        if commands::find(&candidate).is_some() {
            full = candidate;
        }
    }
    let arguments = starts
        .iter()
        .map(|&k| Written {
            value: match single(k) {
                Some(text) => Argument::Text(text.to_owned()),
                None => match tokens.get(k).map(|t| t.token_type()) {
                    Some(TokenType::Number { text })
                        if is_symbol(tokens.get(k + 1), Symbol::Comma)
                            || is_symbol(tokens.get(k + 1), Symbol::RightParen) =>
                    {
                        Argument::Number(text.to_string())
                    }
                    _ => Argument::Computed,
                },
            },
            at: position(tokens[k]),
        })
        .collect();
    analysis.commands.push(CommandUse {
        name: full,
        at: position(tokens[name_at]),
        given,
        open,
        sub,
        arguments,
    });
}

fn lint_commands(analysis: &mut Analysis) {
    let read_only = analysis.read_only();
    for used in &analysis.commands {
        if used.name.contains('.') {
            // Module commands (`JSON.SET`) are outside the table.
            continue;
        }
        let shown = used.name.replace('|', " ").to_ascii_uppercase();
        let Some(c) = commands::find(&used.name) else {
            let hint = closest(
                &used.name,
                commands::COMMANDS
                    .iter()
                    .map(|c| c.name)
                    .filter(|n| !n.contains('|')),
            )
            .map(|near| format!("; did you mean `{near}`?"))
            .unwrap_or_default();
            analysis.problems.push(Problem {
                at: used.at,
                message: format!("`{shown}` is not a Redis command{hint}"),
            });
            continue;
        };
        if !c.name.contains('|') && c.subcommands().next().is_some() {
            let Some((sub, at)) = &used.sub else {
                // The subcommand is computed: nothing more to check.
                continue;
            };
            let names: Vec<&str> = c
                .subcommands()
                .map(|s| s.name.split_once('|').map_or(s.name, |(_, n)| n))
                .collect();
            let hint = closest(sub, names.iter().copied()).map_or_else(
                || format!(" (it has {})", names.join(", ")),
                |near| format!("; did you mean `{shown} {near}`?"),
            );
            analysis.problems.push(Problem {
                at: *at,
                message: format!(
                    "`{shown} {}` is not a Redis command: `{shown}` has no subcommand `{}`{hint}",
                    sub.to_ascii_uppercase(),
                    sub.to_ascii_uppercase()
                ),
            });
            continue;
        }
        if !c.accepts(used.given, used.open) {
            let passed = used.given.saturating_sub(1);
            let at_least = if used.open { "at least " } else { "" };
            analysis.problems.push(Problem {
                at: used.at,
                message: format!(
                    "`{shown}` takes {}, but this call passes {at_least}{passed}: Redis \
                     refuses it (\"wrong number of arguments\")",
                    c.arity_text()
                ),
            });
        }
        if let Some(note) = c.availability() {
            analysis.warnings.push(Problem {
                at: used.at,
                message: format!("`{shown}` {note}"),
            });
        }
        if let Some(message) = refusal(c, &shown, read_only) {
            analysis.problems.push(Problem {
                at: used.at,
                message,
            });
        }
        literal_keys(used, c, &shown, &mut analysis.problems);
    }
}

/// Why a server refuses the call of `c` in the script: a command refused in any script,
/// or one that counts as a write in a `no-writes` one.
fn refusal(c: &commands::Command, shown: &str, read_only: bool) -> Option<String> {
    if c.refused_in_scripts() {
        let allowing = c.on.without(c.noscript);
        if allowing.is_empty() {
            return Some(format!(
                "`{shown}` cannot be called from a script: Redis refuses it"
            ));
        }
        let s = |servers: Servers| if servers.iter().count() == 1 { "s" } else { "" };
        return Some(format!(
            "`{shown}` cannot be called from a script on {}, which refuse{} it \
             ({allowing} allow{} it)",
            c.noscript,
            s(c.noscript),
            s(allowing),
        ));
    }
    if !(c.write && read_only) {
        return None;
    }
    Some(if commands::MAY_REPLICATE.contains(&c.name) {
        format!(
            "`{shown}` counts as a write (it may replicate), and Redis refuses it \
             in a script declared `#!lua flags=no-writes`"
        )
    } else {
        format!("`{shown}` writes, but the script is declared `#!lua flags=no-writes`")
    })
}

/// A key written into the script (`redis.call('GET', 'config:limit')`) where the command
/// certainly takes a key ([`commands::Command::keys_in`]): an error on every server, not
/// only a Cluster. Redis requires a script to be given every key it uses in `KEYS`: a
/// Cluster (and a cluster client) routes the script by them alone and refuses a key of
/// another slot, and a script that passes on one server breaks when the deployment moves
/// to a Cluster. A computed argument (`KEYS[1] .. ':' .. id`) is never flagged.
fn literal_keys(
    used: &CommandUse,
    c: &commands::Command,
    shown: &str,
    problems: &mut Vec<Problem>,
) {
    if c.keys.is_empty() {
        return;
    }
    let call: Vec<Argument> = used.arguments.iter().map(|a| a.value.clone()).collect();
    for i in c.keys_in(&call, used.open) {
        let Some(written) = used.arguments.get(i) else {
            continue;
        };
        let (Argument::Text(key) | Argument::Number(key)) = &written.value else {
            continue;
        };
        problems.push(Problem {
            at: written.at,
            message: format!(
                "`{key}` is a key of `{shown}` written into the script: pass it in KEYS \
                 instead (a `#[key]` parameter, read as `KEYS[n]`); Redis requires every key \
                 a script uses to come in KEYS, on any server (a Cluster routes the script \
                 by them alone)"
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(a: &Analysis) -> Vec<String> {
        a.problems
            .iter()
            .map(|p| format!("{}: {}", p.at, p.message))
            .collect()
    }

    fn warnings(a: &Analysis) -> Vec<String> {
        a.warnings
            .iter()
            .map(|p| format!("{}: {}", p.at, p.message))
            .collect()
    }

    /// The exact version of the matrix server of `product` whose version starts with
    /// `line` ("7.0"), so the expected messages follow a regenerated table.
    fn server(product: commands::Product, line: &str) -> &'static str {
        commands::SERVERS
            .iter()
            .find(|s| s.product == product && s.version.starts_with(&format!("{line}.")))
            .map_or_else(
                || panic!("no {product} {line} in the matrix"),
                |s| s.version,
            )
    }

    #[test]
    fn a_leading_byte_order_mark_is_named() {
        let a = analyze("\u{feff}return 1\n");
        assert_eq!(a.problems.len(), 1, "{:?}", a.problems);
        assert!(
            a.problems[0].message.contains("byte order mark"),
            "{:?}",
            a.problems
        );
    }

    #[test]
    fn a_comment_ends_at_a_lone_carriage_return_as_lua_reads_it() {
        // The code after `\r` runs: it is checked, not hidden in the comment.
        let a = analyze("-- c\rreturn redis.call('NOSUCH')\n");
        assert!(
            a.problems.iter().any(|p| p.message.contains("NOSUCH")),
            "{:?}",
            a.problems
        );
        // ...and a local it declares is defined for what follows.
        let a = analyze("-- c\rlocal parts = {}\nreturn #parts\n");
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(lone_cr_as_lf("a\r\nb\rc"), "a\r\nb\nc");
    }

    #[test]
    fn a_valkey_only_command_warns_naming_the_redis_servers() {
        use commands::Product::Redis;
        let a = analyze("return redis.call('DELIFEQ', KEYS[1], ARGV[1])");
        assert!(a.problems.is_empty(), "{:?}", messages(&a));
        assert_eq!(
            warnings(&a),
            vec![format!(
                "1:19: `DELIFEQ` exists from Valkey 9.0.0; Redis {}, {} and {} lack it",
                server(Redis, "6.2"),
                server(Redis, "7.0"),
                server(Redis, "8.2"),
            )]
        );
    }

    #[test]
    fn a_redis_8_only_command_warns_naming_7_0_and_valkey() {
        use commands::Product::{Redis, Valkey};
        let a = analyze(
            "local rcall = redis.call\nreturn rcall('xackdel', KEYS[1], 'g', 'IDS', 1, ARGV[1])",
        );
        assert!(a.problems.is_empty(), "{:?}", messages(&a));
        assert_eq!(
            warnings(&a),
            vec![format!(
                "2:14: `XACKDEL` exists from Redis 8.2.0; Redis {}, {} and Valkey {} lack it",
                server(Redis, "6.2"),
                server(Redis, "7.0"),
                server(Valkey, "9.1"),
            )]
        );
    }

    #[test]
    fn a_command_both_products_added_later_names_both_first_versions() {
        use commands::Product::Redis;
        let a = analyze("return redis.call('HGETDEL', KEYS[1], 'FIELDS', 1, ARGV[1])");
        assert_eq!(
            warnings(&a),
            vec![format!(
                "1:19: `HGETDEL` exists from Redis 8.0.0 and Valkey 9.1.0; Redis {} and {} lack it",
                server(Redis, "6.2"),
                server(Redis, "7.0"),
            )]
        );
        // A subcommand is checked on its own: CLIENT NO-TOUCH came with 7.2.
        let a = analyze("redis.call('CLIENT', 'NO-TOUCH', 'ON')");
        assert!(
            a.warnings[0]
                .message
                .starts_with("`CLIENT NO-TOUCH` exists from Redis 7.2.0")
        );
    }

    #[test]
    fn a_command_every_server_has_gives_no_warning_and_an_unknown_one_an_error() {
        let a = analyze("redis.call('SET', KEYS[1], 1)\nredis.call('HGETDELL', KEYS[1])");
        assert!(a.warnings.is_empty(), "{:?}", warnings(&a));
        assert_eq!(
            messages(&a),
            vec!["2:12: `HGETDELL` is not a Redis command; did you mean `HGETDEL`?".to_owned()]
        );
    }

    #[test]
    fn a_command_some_servers_refuse_in_scripts_is_an_error_naming_them() {
        use commands::Product::{Redis, Valkey};
        let a = analyze("return redis.call('BLPOP', KEYS[1], 0)");
        assert_eq!(
            messages(&a),
            vec![format!(
                "1:19: `BLPOP` cannot be called from a script on Redis {} and {}, which refuse it \
                 (Redis {} and Valkey {} allow it)",
                server(Redis, "6.2"),
                server(Redis, "7.0"),
                server(Redis, "8.2"),
                server(Valkey, "9.1"),
            )]
        );
    }

    #[test]
    fn counts_highest_literal_keys_and_argv() {
        let a = analyze(
            "local v = redis.call('GET', KEYS[1])\nreturn redis.call('SET', KEYS[2], ARGV[3])",
        );
        assert_eq!(a.keys.highest, 2);
        assert_eq!(a.argv.highest, 3);
        assert_eq!(
            a.argv.highest_at,
            Some(Position {
                line: 2,
                column: 35
            })
        );
        assert!(!a.keys.dynamic);
        assert!(a.problems.is_empty(), "{:?}", a.problems);
    }

    #[test]
    fn hash_and_computed_index_are_dynamic() {
        let a = analyze("for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end\nreturn ARGV[1]");
        assert!(a.keys.dynamic);
        assert_eq!(a.keys.highest, 0);
        assert!(!a.argv.dynamic);
    }

    #[test]
    fn reading_by_count_is_told_apart_from_a_computed_index() {
        let a = analyze(
            "for i, k in ipairs(KEYS) do redis.call('DEL', k) end\n\
             local n = #ARGV\nreturn KEYS[n]",
        );
        assert_eq!(
            a.keys.counted,
            Some((
                Position {
                    line: 1,
                    column: 20
                },
                "ipairs(KEYS)".to_owned()
            ))
        );
        assert_eq!(
            a.argv.counted,
            Some((
                Position {
                    line: 2,
                    column: 11
                },
                "#ARGV".to_owned()
            ))
        );
        assert_eq!(a.keys.computed_at, Some(Position { line: 3, column: 8 }));
        let a = analyze("return redis.call('DEL', unpack(KEYS))");
        assert_eq!(
            a.keys.counted.map(|(_, how)| how).as_deref(),
            Some("unpack(KEYS)")
        );
    }

    #[test]
    fn field_named_keys_is_not_the_global() {
        let a = analyze("local t = {KEYS = 1}\nreturn t.KEYS");
        assert_eq!(a.keys, Usage::default());
    }

    #[test]
    fn unknown_command_is_reported_with_position() {
        let a = analyze("redis.call('SET', KEYS[1], 1)\nredis.call('SLEEP', 1)");
        assert_eq!(
            messages(&a),
            vec!["2:12: `SLEEP` is not a Redis command".to_owned()]
        );
    }

    #[test]
    fn pcall_and_call_without_parentheses_are_checked() {
        let a = analyze("redis.pcall('NOPE')\nredis.call 'ALSONOPE'");
        assert_eq!(a.problems.len(), 2);
    }

    #[test]
    fn noscript_commands_are_refused() {
        let a = analyze("redis.call('MULTI')\nredis.call('SCRIPT', 'FLUSH')");
        assert_eq!(a.problems.len(), 2, "{:?}", messages(&a));
        assert!(a.problems[1].message.contains("SCRIPT FLUSH"));
    }

    #[test]
    fn calls_through_aliases_are_checked() {
        let a = analyze(
            "local rcall = redis.call\n\
             local r = redis\n\
             local M = {}\n\
             M.pcall = r.pcall\n\
             rcall('SETT', KEYS[1], 1)\n\
             r.call('GETT', KEYS[1])\n\
             M.pcall('DELL', KEYS[1])\n\
             return rcall('GET', KEYS[1])",
        );
        assert_eq!(
            messages(&a),
            vec![
                "5:7: `SETT` is not a Redis command; did you mean `SET`?".to_owned(),
                "6:8: `GETT` is not a Redis command; did you mean `GET`?".to_owned(),
                "7:9: `DELL` is not a Redis command; did you mean `DEL`?".to_owned(),
            ]
        );
        assert_eq!(a.commands.len(), 4);
    }

    #[test]
    fn a_name_that_is_also_something_else_is_not_an_alias() {
        // `f` is redis.call, then a function: calls through it cannot be resolved.
        let a = analyze("local f = redis.call\nf = function(x) return x end\nreturn f('anything')");
        assert!(a.problems.is_empty(), "{:?}", messages(&a));
        // A call's result is not an alias, nor is a second name of a list.
        let a =
            analyze("local v = redis.call('GET', KEYS[1])\nlocal a, b = 1, redis.call\nreturn v");
        assert!(a.problems.is_empty(), "{:?}", messages(&a));
        assert_eq!(a.commands.len(), 1);
    }

    #[test]
    fn publish_and_pfcount_are_writes_for_a_no_writes_script() {
        let a = analyze(
            "#!lua flags=no-writes\n\
             local rcall = redis.call\n\
             rcall('PUBLISH', 'ch', 'x')\n\
             redis.call('SPUBLISH', KEYS[1], 'x')\n\
             return redis.call('PFCOUNT', KEYS[1])",
        );
        assert_eq!(a.problems.len(), 3, "{:?}", messages(&a));
        assert!(
            a.problems
                .iter()
                .all(|p| p.message.contains("counts as a write"))
        );
    }

    #[test]
    fn module_commands_are_not_checked() {
        assert!(
            analyze("return redis.call('JSON.GET', KEYS[1])")
                .problems
                .is_empty()
        );
    }

    #[test]
    fn shebang_flags_are_read_and_positions_kept() {
        let a = analyze("#!lua flags=no-writes,allow-stale\nreturn redis.call('GET', KEYS[1])");
        assert!(a.shebang);
        assert!(a.read_only());
        assert_eq!(a.flags, vec!["no-writes", "allow-stale"]);
        assert_eq!(a.keys.highest_at.map(|p| p.line), Some(2));
        assert!(a.problems.is_empty());
    }

    #[test]
    fn write_in_no_writes_script_is_refused() {
        let a = analyze("#!lua flags=no-writes\nreturn redis.call('set', KEYS[1], 1)");
        assert_eq!(
            messages(&a),
            vec![
                "2:19: `SET` writes, but the script is declared `#!lua flags=no-writes`".to_owned()
            ]
        );
    }

    /// What Redis 7.0, 8.2 and Valkey 9.1 refuse (EVAL answers "Unexpected flag in script
    /// shebang: ", "Invalid script shebang", "Unexpected engine in script shebang").
    #[test]
    fn a_shebang_the_servers_refuse_is_a_problem() {
        for (source, says) in [
            ("#!lua flags=no-writes,\nreturn 1", "empty flag"),
            ("#!lua flags=,no-writes\nreturn 1", "empty flag"),
            ("#!lua flags=no-writes, allow-oom\nreturn 1", "empty flag"),
            ("#!lua flags=no-writes", "Invalid script shebang"),
            ("#!lua", "Invalid script shebang"),
            (
                "#!lua flags=no-writes\0x\nreturn 1",
                "Invalid script shebang",
            ),
            ("#! lua\nreturn 1", "engine"),
            ("#!\nreturn 1", "engine"),
            ("#!lua\u{c}flags=no-writes\nreturn 1", "engine"),
            ("#!lua flags=NO-WRITES\nreturn 1", "`NO-WRITES`"),
            ("#!lua FLAGS=no-writes\nreturn 1", "`FLAGS=no-writes`"),
        ] {
            let a = analyze(source);
            assert_eq!(a.problems.len(), 1, "{source:?}: {:?}", messages(&a));
            assert!(
                a.problems[0].message.contains(says),
                "{source:?}: {:?}",
                messages(&a)
            );
            assert_eq!(a.problems[0].at, Position { line: 1, column: 1 });
        }
    }

    /// What the same servers accept, with the flags they read.
    #[test]
    fn a_shebang_the_servers_accept_is_read_as_they_read_it() {
        for (source, flags) in [
            ("#!lua flags=\nreturn 1", &[][..]),
            ("#!lua\n", &[]),
            ("#!lua\r\nreturn 1", &[]),
            ("#!lua flags=no-writes\r\nreturn 1", &["no-writes"]),
            (
                "#!lua flags=no-writes,no-writes\nreturn 1",
                &["no-writes", "no-writes"],
            ),
            ("#!lua\tflags=no-writes  \nreturn 1", &["no-writes"]),
            ("#!lua \u{b}flags=allow-oom\nreturn 1", &["allow-oom"]),
            (
                "#!lua flags=no-writes flags=allow-oom\nreturn 1",
                &["no-writes", "allow-oom"],
            ),
        ] {
            let a = analyze(source);
            assert!(a.problems.is_empty(), "{source:?}: {:?}", messages(&a));
            assert_eq!(a.flags, flags, "{source:?}");
        }
    }

    #[test]
    fn unknown_flag_and_option_are_refused() {
        let a = analyze("#!lua flags=no-writes,fast name=x\nreturn 1");
        assert_eq!(a.problems.len(), 2, "{:?}", messages(&a));
        assert!(a.problems[0].message.contains("`fast`"));
        assert!(a.problems[1].message.contains("`name=x`"));
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let a = analyze("local x = 1\nif x then\n  return 1\n");
        assert!(!a.problems.is_empty());
        assert!(a.problems[0].message.starts_with("Lua syntax error"));
        assert_eq!(a.problems[0].at.line, 4);
    }

    #[test]
    fn lua_5_2_goto_is_a_syntax_error() {
        assert!(!analyze("goto done\n::done::").problems.is_empty());
    }

    #[test]
    fn a_literal_argument_count_outside_the_arity_is_an_error() {
        let a = analyze(
            "redis.call('ZADD', KEYS[1], 1)\n\
             redis.call('GET', KEYS[1], 'extra')\n\
             redis.call('ZADD', KEYS[1], unpack(ARGV))\n\
             redis.call('HMSET', KEYS[1], 'a', 1, unpack(ARGV))\n\
             redis.call('GET', ...)\n\
             return redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))",
        );
        assert_eq!(
            messages(&a),
            vec![
                "1:12: `ZADD` takes at least 3 arguments, but this call passes 2: Redis refuses \
                 it (\"wrong number of arguments\")"
                    .to_owned(),
                "2:12: `GET` takes exactly 1 argument, but this call passes 2: Redis refuses \
                 it (\"wrong number of arguments\")"
                    .to_owned(),
            ]
        );
    }

    #[test]
    fn an_unknown_subcommand_is_an_error_with_did_you_mean() {
        let a = analyze(
            "local rcall = redis.call\n\
             rcall('OBJECT', 'ENCODINGG', KEYS[1])\n\
             rcall('XINFO', 'STREAMM', KEYS[1])\n\
             rcall('OBJECT', 'encoding', KEYS[1])\n\
             return rcall('CLIENT', ARGV[1])",
        );
        assert_eq!(
            messages(&a),
            vec![
                "2:17: `OBJECT ENCODINGG` is not a Redis command: `OBJECT` has no subcommand \
                 `ENCODINGG`; did you mean `OBJECT ENCODING`?"
                    .to_owned(),
                "3:16: `XINFO STREAMM` is not a Redis command: `XINFO` has no subcommand \
                 `STREAMM`; did you mean `XINFO STREAM`?"
                    .to_owned(),
            ]
        );
    }

    #[test]
    fn calls_through_wrapper_functions_and_pcall_are_checked() {
        let a = analyze(
            "local rcall = redis.call\n\
             local function rc(...) return redis.call(...) end\n\
             local M = {}\n\
             function M.call(cmd, ...) return rcall(cmd, ...) end\n\
             rc('GETT', KEYS[1])\n\
             M.call('ZADD', KEYS[1], 1)\n\
             local ok = pcall(redis.call, 'SETT', KEYS[1], 1)\n\
             local ok2 = pcall(rcall, 'DELL', KEYS[1])\n\
             return pcall(rc, 'GET', KEYS[1])",
        );
        assert_eq!(
            messages(&a),
            vec![
                "5:4: `GETT` is not a Redis command; did you mean `GET`?".to_owned(),
                "6:8: `ZADD` takes at least 3 arguments, but this call passes 2: Redis \
                 refuses it (\"wrong number of arguments\")"
                    .to_owned(),
                "7:30: `SETT` is not a Redis command; did you mean `SET`?".to_owned(),
                "8:26: `DELL` is not a Redis command; did you mean `DEL`?".to_owned(),
            ]
        );
        assert_eq!(a.commands.len(), 5);
    }

    #[test]
    fn a_computed_command_is_counted_as_unchecked_not_an_error() {
        let a = analyze(
            "local rcall = redis.call\nrcall(ARGV[10], KEYS[1], 1)\nreturn redis.call(ARGV[1])",
        );
        assert!(a.problems.is_empty(), "{:?}", messages(&a));
        assert_eq!(
            a.unchecked,
            vec![
                Position { line: 2, column: 7 },
                Position {
                    line: 3,
                    column: 19
                }
            ]
        );
    }

    #[test]
    fn a_literal_key_is_an_error_at_the_literal() {
        let a = analyze(
            "local limit = redis.call('GET', 'config:limit')\n\
             return redis.call('SET', KEYS[1], limit)",
        );
        assert_eq!(
            messages(&a),
            vec![
                "1:33: `config:limit` is a key of `GET` written into the script: pass it in \
                 KEYS instead (a `#[key]` parameter, read as `KEYS[n]`); Redis requires every \
                 key a script uses to come in KEYS, on any server (a Cluster routes the \
                 script by them alone)"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn a_literal_key_is_found_through_aliases_pcall_subcommands_and_numkeys() {
        let a = analyze(
            "local rcall = redis.call\n\
             rcall('OBJECT', 'ENCODING', 'a')\n\
             pcall(redis.call, 'XINFO', 'STREAM', \"b\")\n\
             redis.call('ZUNIONSTORE', KEYS[1], 2, KEYS[2], [[c]], 'WEIGHTS', 1, 2)\n\
             redis.call('DEL', KEYS[1], 'd', unpack(ARGV))\n\
             redis.call('INCR', 42)\n\
             return redis.call('XREAD', 'COUNT', 10, 'STREAMS', KEYS[1], 'e', 0, 0)",
        );
        let at: Vec<String> = a
            .problems
            .iter()
            .map(|p| {
                format!(
                    "{}: {}",
                    p.at,
                    p.message.split(" written").next().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            at,
            [
                "2:29: `a` is a key of `OBJECT ENCODING`",
                "3:38: `b` is a key of `XINFO STREAM`",
                "4:48: `c` is a key of `ZUNIONSTORE`",
                "5:28: `d` is a key of `DEL`",
                "6:20: `42` is a key of `INCR`",
                "7:61: `e` is a key of `XREAD`",
            ]
        );
    }

    /// Only what is certainly a key is flagged: a key built from KEYS (as BullMQ's scripts
    /// build theirs), an argument that is not a key, a position after a count or keyword
    /// that is computed, an empty string.
    #[test]
    fn a_computed_key_or_an_uncertain_position_is_not_flagged() {
        let a = analyze(
            "local rcall = redis.call\n\
             local jobKey = KEYS[1] .. ':' .. ARGV[1]\n\
             rcall('HSET', jobKey, 'state', 'waiting')\n\
             rcall('SET', KEYS[2] .. ':lock', 'token', 'PX', 1000)\n\
             rcall('PUBLISH', 'channel', 'x')\n\
             rcall('SPUBLISH', 'shard-channel', 'x')\n\
             rcall('ZUNIONSTORE', KEYS[1], #KEYS, unpack(KEYS))\n\
             rcall('ZUNIONSTORE', KEYS[1], ARGV[1], KEYS[2], 'maybe-a-weight')\n\
             rcall('XREAD', 'COUNT', ARGV[2], 'STREAMS', KEYS[1], 'maybe', 0, 0)\n\
             rcall('SORT', KEYS[1], 'BY', 'nosort', 'STORE', 'unknown-search')\n\
             rcall('GET', '')\n\
             return rcall('EXPIRE', KEYS[1], 10)",
        );
        assert!(a.problems.is_empty(), "{:?}", messages(&a));
    }

    #[test]
    fn writes_is_known_only_when_every_call_is_seen_with_a_known_command() {
        for (source, writes) in [
            ("return redis.call('GET', KEYS[1])", Some(false)),
            ("return 1", Some(false)),
            (
                "local rcall = redis.call\nreturn rcall('OBJECT', ARGV[1], KEYS[1])",
                Some(false),
            ),
            (
                "redis.call(ARGV[1], KEYS[1])\nreturn redis.call('DEL', KEYS[1])",
                Some(true),
            ),
            ("return redis.call('PFCOUNT', KEYS[1])", Some(true)),
            ("return redis.call(ARGV[1], KEYS[1])", None),
            ("return redis.call('JSON.GET', KEYS[1])", None),
            ("return redis.call('CLUSTER', ARGV[1])", None),
            (
                "local function run(f) return f('DEL', KEYS[1]) end\nreturn run(redis.call)",
                None,
            ),
            ("return redis['call']('DEL', KEYS[1])", None),
            ("return server.call('DEL', KEYS[1])", Some(true)),
            (
                "local server = {call = print}\nreturn server.call('DEL')",
                Some(false),
            ),
            (
                "local function f(server) return server end\nreturn f(1)",
                None,
            ),
            ("local r = redis.call\nreturn r{'DEL', KEYS[1]}", None),
            (
                "local t = {}\nt[1] = redis.call\nreturn t[1]('DEL', KEYS[1])",
                None,
            ),
            ("return redis.call('GET', KEYS[1]", None),
        ] {
            assert_eq!(analyze(source).writes(), writes, "{source}");
        }
    }

    #[test]
    fn index_zero_is_reported() {
        let a = analyze("return KEYS[0]");
        assert!(a.problems[0].message.contains("KEYS[0]"));
    }
}
