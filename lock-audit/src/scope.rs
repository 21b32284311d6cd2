//! Names and scopes: which globals a script reads or assigns.
//!
//! Redis runs a script in a sandbox whose globals are fixed, and differ by server
//! ([`crate::globals`]: only Redis 6.2 keeps `print`, `getfenv`, `setfenv` and
//! `newproxy`; `os` is on Redis 8.2 and Valkey but not on Redis 7.0). Reading a global
//! a server does not define fails there when the script runs ("Script attempted to
//! access nonexistent global variable"), and so does assigning any global ("Script
//! attempted to create global variable"); calling a member a library table lacks there
//! (`redis.acl_check_cmd` on Redis 6.2) fails too ("attempt to call field ... (a nil
//! value)"). All are found here, before the script runs, for the servers the analysis
//! is about ([`crate::lua::Analysis::servers`]): the walk follows Lua's scoping (a
//! `local` is visible after its statement, a `local function` inside its own body, a
//! parameter in its function, a loop variable in its loop, and a `repeat` body's locals
//! in its `until`).

use full_moon::ast::{
    BinOp, Block, Call, Expression, Field, FunctionArgs, FunctionBody, FunctionCall, Index,
    LastStmt, Parameter, Prefix, Stmt, Suffix, Var,
};
use full_moon::tokenizer::{TokenReference, TokenType};

use crate::commands::{Product, Servers};
use crate::globals;
use crate::problem::{Position, Problem, closest};

/// Every read of a global some server of `servers` does not define, every assignment of
/// a global, and every call of a library member some of them lack, unless the call is
/// guarded by a test of that member (`if redis.setresp then redis.setresp(3) end`,
/// `redis.setresp and redis.setresp(3)`). Each name is reported once, at its first use.
pub(crate) fn check(block: &Block, servers: Servers, problems: &mut Vec<Problem>) {
    let mut walk = Walk {
        servers,
        scopes: vec![Vec::new()],
        seen: Vec::new(),
        defined: Vec::new(),
        found: Vec::new(),
        functions: Vec::new(),
        member_calls: Vec::new(),
        guards: Vec::new(),
        table_writes: Vec::new(),
    };
    walk.block_in(block);
    for (name, at, assigned) in walk.found {
        let message = if assigned {
            let fix = if walk.functions.contains(&name) {
                format!("local function {name}")
            } else {
                format!("local {name}")
            };
            format!(
                "assigns the global `{name}`, which the servers refuse (\"Attempt to modify a \
                 readonly table\"; before that protection, \"Script attempted to create \
                 global variable\"): declare it `{fix}`"
            )
        } else {
            let hint = closest(&name, walk.defined.iter().map(String::as_str))
                .or_else(|| closest(&name, globals::everywhere(servers)))
                .map(|near| format!("; did you mean `{near}`?"))
                .unwrap_or_default();
            match globals::find(&name) {
                Some(global) => format!(
                    "`{name}` {}, and the script would fail there with \"Script attempted to \
                     access nonexistent global variable\"{}{hint}",
                    lacking(global, servers, "global"),
                    requires(global, servers)
                        .map(|r| format!(
                            "; a script meant only for the newer servers says so: \
                             `#[lock_script(..., requires = \"{r}\")]`"
                        ))
                        .unwrap_or_default(),
                ),
                None => format!(
                    "`{name}` is not defined: no local or function of the script or its \
                     includes has that name, and Redis's Lua has no such global (the script \
                     would fail with \"Script attempted to access nonexistent global \
                     variable\"){hint}"
                ),
            }
        };
        problems.push(Problem { at, message });
    }
    for (table, at) in walk.table_writes {
        problems.push(Problem {
            at,
            message: format!(
                "assigns a field of the global table `{table}`, which the servers keep \
                 read-only (\"Attempt to modify a readonly table\"): keep the value in a \
                 local table of the script's own"
            ),
        });
    }
    let mut said = Vec::new();
    for (name, at) in walk.member_calls {
        if said.contains(&name) {
            continue;
        }
        if let Some(message) = member_message(&name, servers) {
            problems.push(Problem { at, message });
        }
        said.push(name);
    }
}

/// What is wrong with a call of `table.member` on `servers`.
fn member_message(name: &str, servers: Servers) -> Option<String> {
    let (table, member) = name.split_once('.')?;
    let nil = format!("\"attempt to call field '{member}' (a nil value)\"");
    Some(if let Some(global) = globals::find(name) {
        format!(
            "`{name}` {}, and calling it there fails ({nil}); test it first (`if {name} \
             then`) to call it only where it exists{}",
            lacking(global, servers, "member"),
            requires(global, servers)
                .map(|r| format!(
                    ", or say the script is meant only for the newer servers: \
                     `#[lock_script(..., requires = \"{r}\")]`"
                ))
                .unwrap_or_default(),
        )
    } else {
        let prefix = format!("{table}.");
        let hint = closest(
            name,
            globals::GLOBALS
                .iter()
                .filter(|g| g.name.starts_with(&prefix) && servers.without(g.on).is_empty())
                .map(|g| g.name),
        )
        .map(|near| format!("; did you mean `{near}`?"))
        .unwrap_or_default();
        format!(
            "`{name}` is not defined: `{table}` has no member `{member}` on any server, so \
             calling it fails ({nil}){hint}"
        )
    })
}

/// "exists on Redis 6.2.14 only; Redis 7.0.15, 8.2.3 and Valkey 9.1.2 define no such
/// global": the servers that have it, and those of `servers` that lack it.
fn lacking(global: &globals::Global, servers: Servers, what: &str) -> String {
    let without = servers.without(global.on);
    let verb = if without.iter().count() == 1 {
        "defines"
    } else {
        "define"
    };
    format!(
        "exists on {} only; {without} {verb} no such {what}",
        global.on
    )
}

/// The `requires` that leaves out every server of `servers` lacking the name ("redis
/// 8.2"): when each is older than every server of its product that has it.
fn requires(global: &globals::Global, servers: Servers) -> Option<String> {
    let without = servers.without(global.on);
    let mut floors = Vec::new();
    for product in [Product::Redis, Product::Valkey] {
        let lacking = without.of(product);
        if lacking.is_empty() {
            continue;
        }
        let having = global.on.of(product);
        let first = having.iter().map(|s| version(s.version)).min()?;
        if lacking.iter().any(|s| version(s.version) >= first) {
            return None;
        }
        let name = match product {
            Product::Redis => "redis",
            Product::Valkey => "valkey",
        };
        floors.push(format!(
            "{name} {}.{}",
            first[0],
            first.get(1).unwrap_or(&0)
        ));
    }
    (!floors.is_empty()).then(|| floors.join(", "))
}

/// "8.2.3" as numbers, for comparing.
fn version(text: &str) -> Vec<u32> {
    text.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

struct Walk {
    /// The servers the script is checked for.
    servers: Servers,
    /// The locals of each open scope, innermost last.
    scopes: Vec<Vec<String>>,
    /// Names already reported.
    seen: Vec<String>,
    /// Every local the script declares anywhere, for "did you mean".
    defined: Vec<String>,
    /// Undefined reads (false) and global assignments (true), in order.
    found: Vec<(String, Position, bool)>,
    /// The global assignments that are `function name()` declarations.
    functions: Vec<String>,
    /// Unguarded calls of a member of a global library table
    /// (`redis.acl_check_cmd(...)`), as `table.member`, in order.
    member_calls: Vec<(String, Position)>,
    /// The members tested true where the walk is: in the block of `if redis.setresp
    /// then`, on the right of `redis.setresp and`. Calls of them are not reported.
    guards: Vec<String>,
    /// Assignments into a global library table (`string.x = 1`, `function redis.f()`),
    /// by table, the first of each.
    table_writes: Vec<(String, Position)>,
}

/// The name a token spells, when it is an identifier.
pub(crate) fn name_of(token: &TokenReference) -> Option<&str> {
    match token.token().token_type() {
        TokenType::Identifier { identifier } => Some(identifier.as_str()),
        _ => None,
    }
}

/// Where a token starts in the script.
pub(crate) fn position(token: &TokenReference) -> Position {
    let p = token.token().start_position();
    Position {
        line: p.line(),
        column: p.character(),
    }
}

impl Walk {
    fn is_local(&self, name: &str) -> bool {
        self.scopes.iter().any(|s| s.iter().any(|n| n == name))
    }

    fn declare(&mut self, token: &TokenReference) {
        if let Some(name) = name_of(token) {
            self.defined.push(name.to_owned());
            if let Some(scope) = self.scopes.last_mut() {
                scope.push(name.to_owned());
            }
        }
    }

    fn report(&mut self, token: &TokenReference, assigned: bool) {
        let Some(name) = name_of(token) else { return };
        if self.is_local(name)
            || (!assigned
                && self
                    .servers
                    .without(globals::defined_on(name, self.servers))
                    .is_empty())
        {
            return;
        }
        if self.seen.iter().any(|n| n == name) {
            return;
        }
        self.seen.push(name.to_owned());
        self.found
            .push((name.to_owned(), position(token), assigned));
    }

    /// An assignment into the table `token` names: refused when that is a global table
    /// of the sandbox (every one is read-only), not a local of the same name.
    fn table_write(&mut self, token: &TokenReference) {
        let Some(table) = name_of(token) else { return };
        let global_table = table == "_G" || globals::is_table(table);
        if !global_table
            || self.is_local(table)
            || self.table_writes.iter().any(|(t, _)| t == table)
        {
            return;
        }
        self.table_writes.push((table.to_owned(), position(token)));
    }

    /// A block in a new scope.
    fn block(&mut self, block: &Block) {
        self.scopes.push(Vec::new());
        self.block_in(block);
        self.scopes.pop();
    }

    /// A block's statements in the current scope.
    fn block_in(&mut self, block: &Block) {
        for stmt in block.stmts() {
            self.stmt(stmt);
        }
        if let Some(LastStmt::Return(ret)) = block.last_stmt() {
            for e in ret.returns() {
                self.expr(e);
            }
        }
    }

    fn stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Assignment(a) => {
                for e in a.expressions() {
                    self.expr(e);
                }
                for var in a.variables() {
                    match var {
                        Var::Name(name) => self.report(name, true),
                        Var::Expression(v) => {
                            if let Prefix::Name(table) = v.prefix() {
                                self.table_write(table);
                            }
                            self.var(var);
                        }
                        other => self.var(other),
                    }
                }
            }
            Stmt::Do(d) => self.block(d.block()),
            Stmt::FunctionCall(call) => self.call(call),
            Stmt::FunctionDeclaration(f) => {
                let name = f.name();
                let names: Vec<&TokenReference> = name.names().iter().collect();
                let method = name.method_name().is_some();
                match names.as_slice() {
                    [only] if !method => {
                        if let Some(n) = name_of(only) {
                            self.functions.push(n.to_owned());
                        }
                        self.report(only, true);
                    }
                    [first, ..] => {
                        self.report(first, false);
                        self.table_write(first);
                    }
                    [] => {}
                }
                self.body(f.body(), method);
            }
            Stmt::GenericFor(f) => {
                for e in f.expressions() {
                    self.expr(e);
                }
                self.scopes.push(Vec::new());
                for n in f.names() {
                    self.declare(n);
                }
                self.block_in(f.block());
                self.scopes.pop();
            }
            Stmt::If(i) => {
                self.expr(i.condition());
                self.guarded_block(i.condition(), i.block());
                for branch in i.else_if().into_iter().flatten() {
                    self.expr(branch.condition());
                    self.guarded_block(branch.condition(), branch.block());
                }
                if let Some(b) = i.else_block() {
                    self.block(b);
                }
            }
            Stmt::LocalAssignment(l) => {
                for e in l.expressions() {
                    self.expr(e);
                }
                for n in l.names() {
                    self.declare(n);
                }
            }
            Stmt::LocalFunction(f) => {
                self.declare(f.name());
                self.body(f.body(), false);
            }
            Stmt::NumericFor(f) => {
                self.expr(f.start());
                self.expr(f.end());
                if let Some(step) = f.step() {
                    self.expr(step);
                }
                self.scopes.push(Vec::new());
                self.declare(f.index_variable());
                self.block_in(f.block());
                self.scopes.pop();
            }
            Stmt::Repeat(r) => {
                // The `until` condition sees the body's locals.
                self.scopes.push(Vec::new());
                self.block_in(r.block());
                self.expr(r.until());
                self.scopes.pop();
            }
            Stmt::While(w) => {
                self.expr(w.condition());
                self.block(w.block());
            }
            _ => {}
        }
    }

    fn body(&mut self, body: &FunctionBody, method: bool) {
        self.scopes.push(Vec::new());
        if method && let Some(scope) = self.scopes.last_mut() {
            scope.push("self".to_owned());
        }
        for p in body.parameters() {
            match p {
                Parameter::Name(n) => self.declare(n),
                // Lua 5.1 gives a vararg function its arguments as the local `arg` too.
                Parameter::Ellipsis(_) => {
                    if let Some(scope) = self.scopes.last_mut() {
                        scope.push("arg".to_owned());
                    }
                }
                _ => {}
            }
        }
        self.block_in(body.block());
        self.scopes.pop();
    }

    fn var(&mut self, var: &Var) {
        match var {
            Var::Name(name) => self.report(name, false),
            Var::Expression(v) => {
                let suffixes: Vec<&Suffix> = v.suffixes().collect();
                self.member(v.prefix(), &suffixes);
                self.prefix(v.prefix());
                for s in suffixes {
                    self.suffix(s);
                }
            }
            _ => {}
        }
    }

    /// `table.member` at the start of a call or an index, when `table` is a global
    /// library table (not a local of that name): the member, and its token.
    fn member_of<'a>(
        &self,
        prefix: &Prefix,
        suffixes: &[&'a Suffix],
    ) -> Option<(String, &'a TokenReference)> {
        let Prefix::Name(table) = prefix else {
            return None;
        };
        let table = name_of(table)?;
        if self.is_local(table) || !globals::is_table(table) {
            return None;
        }
        let Some(Suffix::Index(Index::Dot { name, .. })) = suffixes.first() else {
            return None;
        };
        Some((format!("{table}.{}", name_of(name)?), name))
    }

    /// A call of `table.member(...)` some server lacks, unless a test of it guards it.
    fn member(&mut self, prefix: &Prefix, suffixes: &[&Suffix]) {
        let Some((full, token)) = self.member_of(prefix, suffixes) else {
            return;
        };
        if !matches!(suffixes.get(1), Some(Suffix::Call(Call::AnonymousCall(_))))
            || self.guards.contains(&full)
        {
            return;
        }
        let (table, _) = full.split_once('.').unwrap_or((&full, ""));
        let defined = globals::defined_on(&full, self.servers);
        let table_defined = globals::defined_on(table, self.servers);
        // A table some server lacks is reported as a global already.
        if !self.servers.without(defined).is_empty()
            && self.servers.without(table_defined).is_empty()
        {
            self.member_calls.push((full, position(token)));
        }
    }

    /// The members an expression tests true when it is true: `redis.setresp`, and each
    /// side of an `and`.
    fn tested(&self, expr: &Expression) -> Vec<String> {
        match expr {
            Expression::Var(Var::Expression(v)) => {
                let suffixes: Vec<&Suffix> = v.suffixes().collect();
                match self.member_of(v.prefix(), &suffixes) {
                    Some((full, _)) if suffixes.len() == 1 => vec![full],
                    _ => Vec::new(),
                }
            }
            Expression::Parentheses { expression, .. } => self.tested(expression),
            Expression::BinaryOperator {
                lhs,
                binop: BinOp::And(_),
                rhs,
            } => {
                let mut both = self.tested(lhs);
                both.extend(self.tested(rhs));
                both
            }
            _ => Vec::new(),
        }
    }

    /// A block walked with the members `condition` tests as guards.
    fn guarded_block(&mut self, condition: &Expression, block: &Block) {
        let guards = self.tested(condition);
        let depth = self.guards.len();
        self.guards.extend(guards);
        self.block(block);
        self.guards.truncate(depth);
    }

    fn prefix(&mut self, prefix: &Prefix) {
        match prefix {
            Prefix::Name(name) => self.report(name, false),
            Prefix::Expression(e) => self.expr(e),
            _ => {}
        }
    }

    fn suffix(&mut self, suffix: &Suffix) {
        match suffix {
            Suffix::Call(Call::AnonymousCall(args)) => self.args(args),
            Suffix::Call(Call::MethodCall(m)) => self.args(m.args()),
            Suffix::Index(Index::Brackets { expression, .. }) => self.expr(expression),
            _ => {}
        }
    }

    fn call(&mut self, call: &FunctionCall) {
        let suffixes: Vec<&Suffix> = call.suffixes().collect();
        self.member(call.prefix(), &suffixes);
        self.prefix(call.prefix());
        for s in suffixes {
            self.suffix(s);
        }
    }

    fn args(&mut self, args: &FunctionArgs) {
        match args {
            FunctionArgs::Parentheses { arguments, .. } => {
                for e in arguments {
                    self.expr(e);
                }
            }
            FunctionArgs::TableConstructor(t) => self.table(t),
            _ => {}
        }
    }

    fn table(&mut self, table: &full_moon::ast::TableConstructor) {
        for field in table.fields() {
            match field {
                Field::ExpressionKey { key, value, .. } => {
                    self.expr(key);
                    self.expr(value);
                }
                Field::NameKey { value, .. } => self.expr(value),
                Field::NoKey(value) => self.expr(value),
                _ => {}
            }
        }
    }

    fn expr(&mut self, expr: &Expression) {
        match expr {
            Expression::BinaryOperator {
                lhs,
                binop: BinOp::And(_),
                rhs,
            } => {
                self.expr(lhs);
                let guards = self.tested(lhs);
                let depth = self.guards.len();
                self.guards.extend(guards);
                self.expr(rhs);
                self.guards.truncate(depth);
            }
            Expression::BinaryOperator { lhs, rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            Expression::Parentheses { expression, .. }
            | Expression::UnaryOperator { expression, .. } => self.expr(expression),
            Expression::Function(f) => self.body(f.body(), false),
            Expression::FunctionCall(call) => self.call(call),
            Expression::TableConstructor(t) => self.table(t),
            Expression::Var(v) => self.var(v),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::commands::Servers;
    use crate::lua::{analyze, analyze_on};

    fn problems(source: &str) -> Vec<String> {
        analyze(source)
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.at, p.message))
            .collect()
    }

    #[test]
    fn a_function_neither_defined_nor_provided_is_an_error_at_its_use() {
        let found = problems(
            "local rcall = redis.call\nlocal target = getTargetQueueList(KEYS[1])\nreturn target",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("2:16: `getTargetQueueList` is not defined"),
            "{found:?}"
        );
    }

    #[test]
    fn assigning_a_global_is_an_error() {
        let found = problems("counter = 1\nfunction helper() return 1 end\nreturn counter");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("1:1: assigns the global `counter`"),
            "{found:?}"
        );
        assert!(
            found[0].ends_with("declare it `local counter`"),
            "{found:?}"
        );
        assert!(
            found[1].starts_with("2:10: assigns the global `helper`"),
            "{found:?}"
        );
    }

    /// Every table of the sandbox is read-only on Redis 6.2.14, 7.0, 8.2 and Valkey 9.1;
    /// `KEYS` and `ARGV` are the call's own and may be written.
    #[test]
    fn assigning_into_a_global_table_is_an_error() {
        let found = problems(
            "string.pad = 1\nfunction redis.helper() end\n_G.x = 1\nKEYS[1] = 'k'\n\
             local cjson = {}\ncjson.x = 1\nreturn 1",
        );
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].starts_with("1:1: assigns a field of the global table `string`"),
            "{found:?}"
        );
        assert!(found[1].starts_with("2:10: assigns a field of the global table `redis`"));
        assert!(found[2].starts_with("3:1: assigns a field of the global table `_G`"));
    }

    #[test]
    fn locals_parameters_loops_and_redis_globals_are_defined() {
        let found = problems(
            "local rcall = redis.call\n\
             local function f(a, ...) local n = select('#', ...) return a + n + #arg end\n\
             local t = {}\n\
             function t.m(x) return x end\n\
             function t:n() return self end\n\
             for i = 1, #KEYS do t[i] = KEYS[i] end\n\
             for k, v in pairs(t) do rcall('SET', k, v) end\n\
             local s\n\
             s = cjson.encode(t) .. cmsgpack.pack(1) .. bit.band(1, 2) .. struct.pack('>I', 1)\n\
             repeat local done = true until done\n\
             local function fact(n) if n < 2 then return 1 end return n * fact(n - 1) end\n\
             return {f(1), fact(3), string.len(s), math.max(1, 2), table.concat({}), \
             tonumber(ARGV[1]), unpack({1})}",
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_local_is_not_visible_before_its_statement_or_outside_its_block() {
        let found = problems(
            "local function a() return b() end\nlocal function b() return 1 end\n\
             do local inner = 1 end\nreturn a() + inner",
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("1:27: `b` is not defined"),
            "{found:?}"
        );
        assert!(
            found[1].starts_with("4:14: `inner` is not defined"),
            "{found:?}"
        );
    }

    /// `print`, `getfenv`, `setfenv` and `newproxy` are Lua 5.1 base functions that only
    /// Redis 6.2 keeps; from 7.0 on (and on Valkey) reading them fails when the script runs.
    #[test]
    fn a_global_only_old_servers_have_is_an_error_naming_them() {
        for name in ["print", "getfenv", "setfenv", "newproxy"] {
            let found = problems(&format!("local f = {name}\nreturn 1"));
            assert_eq!(found.len(), 1, "{name}: {found:?}");
            assert!(
                found[0].starts_with(&format!("1:11: `{name}` exists on Redis 6.2.")),
                "{found:?}"
            );
            assert!(
                found[0].contains("Script attempted to access nonexistent global variable"),
                "{found:?}"
            );
        }
    }

    /// `os` (with only `os.clock`) came after Redis 7.0: a script that otherwise runs on
    /// 7.0 (no command or shebang needs more) fails there.
    #[test]
    fn os_is_an_error_for_a_script_that_runs_on_redis_7_0() {
        for source in ["return os.clock()", "#!lua\nreturn os.clock()"] {
            let found = problems(source);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].contains("`os` exists on Redis 8.2."), "{found:?}");
            assert!(found[0].contains(" 7.0."), "{found:?}");
        }
    }

    /// The servers asked about decide: `os` is fine on Redis 8.2 and Valkey, and a local
    /// of a global's name is the local.
    #[test]
    fn a_global_every_server_asked_about_has_is_fine() {
        let newer =
            Servers::from_fn(|s| !s.version.starts_with("6.") && !s.version.starts_with("7.0."));
        assert!(analyze_on("return os.clock()", newer).problems.is_empty());
        let found = problems("return os.clock()");
        assert!(
            found[0].contains("requires = \"redis 8.2\""),
            "a floor that leaves the lacking servers out is suggested: {found:?}"
        );
        // Only Redis 6.2 has `print`: no floor helps, none is suggested.
        assert!(!problems("print(1)")[0].contains("requires"));
        assert!(problems("local print = function() end\nprint(1)").is_empty());
        // Valkey's own name for `redis`.
        assert!(
            problems("return server.call('GET', KEYS[1])")[0]
                .starts_with("1:8: `server` exists on Valkey 9.")
        );
        let valkey = Servers::from_fn(|s| s.product == crate::commands::Product::Valkey);
        assert!(
            analyze_on("return server.call('GET', KEYS[1])", valkey)
                .problems
                .is_empty()
        );
    }

    /// Calling a member a server's library table lacks fails there; reading it (a feature
    /// test) does not.
    #[test]
    fn a_call_of_a_member_some_servers_lack_is_an_error_unless_the_script_tests_it() {
        let found = problems("return redis.acl_check_cmd('GET', KEYS[1])");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("1:14: `redis.acl_check_cmd` exists on Redis 7.0."),
            "{found:?}"
        );
        assert!(found[0].contains("; Redis 6.2."), "{found:?}");
        assert!(
            found[0].contains("attempt to call field 'acl_check_cmd' (a nil value)"),
            "{found:?}"
        );
        assert!(
            problems("if redis.acl_check_cmd then return redis.acl_check_cmd('GET', KEYS[1]) end")
                .is_empty()
        );
        assert!(
            problems("return redis.acl_check_cmd and redis.acl_check_cmd('GET', KEYS[1])")
                .is_empty()
        );
        // A read elsewhere guards nothing: the call still fails where the member is nil.
        let unguarded = problems(
            "local f = redis.acl_check_cmd\nif not redis.acl_check_cmd then end\nreturn redis.acl_check_cmd('GET')",
        );
        assert_eq!(unguarded.len(), 1, "{unguarded:?}");
        // A member no server has.
        let found = problems("return string.fromat('%d', 1)");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(
                "1:15: `string.fromat` is not defined: `string` has no member `fromat`"
            ),
            "{found:?}"
        );
        assert!(
            found[0].ends_with("did you mean `string.format`?"),
            "{found:?}"
        );
        // A local table of a library's name is the script's own.
        assert!(
            problems("local string = {}\nfunction string.x() end\nreturn string.x()").is_empty()
        );
    }

    #[test]
    fn a_typo_of_a_local_gets_did_you_mean() {
        let found = problems("local jobCounter = 1\nreturn jobCountr + tonumbr('1')");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].ends_with("did you mean `jobCounter`?"),
            "{found:?}"
        );
        assert!(found[1].ends_with("did you mean `tonumber`?"), "{found:?}");
    }
}
