//! Names and scopes: which globals a script reads or assigns.
//!
//! Redis runs a script in a sandbox whose globals are fixed: Lua 5.1's base library
//! (the part Redis keeps), `string`, `table`, `math`, `os` (only `os.clock`), `bit`,
//! `struct`, `cjson`, `cmsgpack`, `redis`, `KEYS` and `ARGV`. Reading any other global
//! fails when the script runs ("Script attempted to access nonexistent global
//! variable"), and so does assigning one ("Script attempted to create global
//! variable"). Both are found here, before the script runs: the walk follows Lua's
//! scoping (a `local` is visible after its statement, a `local function` inside its own
//! body, a parameter in its function, a loop variable in its loop, and a `repeat`
//! body's locals in its `until`).

use full_moon::ast::{
    Block, Call, Expression, Field, FunctionArgs, FunctionBody, FunctionCall, Index, LastStmt,
    Parameter, Prefix, Stmt, Suffix, Var,
};
use full_moon::tokenizer::{TokenReference, TokenType};

use crate::problem::{Position, Problem, closest};

/// The globals a script running in Redis finds defined (Redis 6.2 to 8.x and Valkey:
/// the allow lists of their Lua sandbox, with Lua 5.1's names they keep).
pub const REDIS_GLOBALS: &[&str] = &[
    "ARGV",
    "KEYS",
    "_G",
    "_VERSION",
    "assert",
    "bit",
    "cjson",
    "cmsgpack",
    "collectgarbage",
    "coroutine",
    "error",
    "gcinfo",
    "getfenv",
    "getmetatable",
    "ipairs",
    "load",
    "loadstring",
    "math",
    "newproxy",
    "next",
    "os",
    "pairs",
    "pcall",
    "print",
    "rawequal",
    "rawget",
    "rawset",
    "redis",
    "select",
    "setfenv",
    "setmetatable",
    "string",
    "struct",
    "table",
    "tonumber",
    "tostring",
    "type",
    "unpack",
    "xpcall",
];

/// Every read of a global Redis does not define, and every assignment of a global.
/// Each undefined name is reported once, at its first use.
pub(crate) fn check(block: &Block, problems: &mut Vec<Problem>) {
    let mut walk = Walk {
        scopes: vec![Vec::new()],
        seen: Vec::new(),
        defined: Vec::new(),
        found: Vec::new(),
        functions: Vec::new(),
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
                "assigns the global `{name}`, which Redis refuses (\"Script attempted to \
                 create global variable\"): declare it `{fix}`"
            )
        } else {
            let hint = closest(&name, walk.defined.iter().map(String::as_str))
                .or_else(|| closest(&name, REDIS_GLOBALS.iter().copied()))
                .map(|near| format!("; did you mean `{near}`?"))
                .unwrap_or_default();
            format!(
                "`{name}` is not defined: no local or function of the script or its includes \
                 has that name, and Redis's Lua has no such global (the script would fail \
                 with \"Script attempted to access nonexistent global variable\"){hint}"
            )
        };
        problems.push(Problem { at, message });
    }
}

struct Walk {
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
}

fn name_of(token: &TokenReference) -> Option<&str> {
    match token.token().token_type() {
        TokenType::Identifier { identifier } => Some(identifier.as_str()),
        _ => None,
    }
}

fn position(token: &TokenReference) -> Position {
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
        if self.is_local(name) || (!assigned && REDIS_GLOBALS.contains(&name)) {
            return;
        }
        if self.seen.iter().any(|n| n == name) {
            return;
        }
        self.seen.push(name.to_owned());
        self.found
            .push((name.to_owned(), position(token), assigned));
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
                    [first, ..] => self.report(first, false),
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
                self.block(i.block());
                for branch in i.else_if().into_iter().flatten() {
                    self.expr(branch.condition());
                    self.block(branch.block());
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
                self.prefix(v.prefix());
                for s in v.suffixes() {
                    self.suffix(s);
                }
            }
            _ => {}
        }
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
        self.prefix(call.prefix());
        for s in call.suffixes() {
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
    use crate::lua::analyze;

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
             tonumber(ARGV[1]), unpack({1}), os.clock()}",
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
