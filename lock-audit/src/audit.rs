//! Auditing a directory of scripts as plain files: what each one is, what is wrong
//! with it, and whether the directory's `SHA1SUMS` still matches.
//!
//! A directory is read with its subdirectories. Each script is audited with its
//! `@include`s expanded ([`crate::include`]): its digest is the expanded body's, its
//! problems point into the file (included or not) they are in, and a file that other
//! scripts include is checked as part of them, not as a script of its own, unless
//! `SHA1SUMS` lists it (then it is both). A file that cannot be read is a problem of
//! that file; the others are audited all the same. `SHA1SUMS` names files as `sha1sum`
//! run in the directory writes them: `x.lua`, `sub/x.lua`, or with `./` before them, as
//! `find . -exec sha1sum {} +` writes them.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::lua::{self, Analysis};
use crate::{include, sha1_hex};

/// One `.lua` file.
#[derive(Clone, Debug)]
pub struct ScriptReport {
    /// The file's path as found (the directory joined with its name).
    pub path: PathBuf,
    /// The file stem, the name the runtime gives the script.
    pub name: String,
    /// SHA1 of the expanded body (the file's bytes when it includes nothing): what
    /// `#[lock_script]` embeds and `SCRIPT LOAD` returns.
    pub sha1: String,
    /// The expanded body as text (a byte sequence that is not UTF-8 shows as U+FFFD).
    pub source: String,
    /// The expanded body, byte for byte: what is sent to the server.
    pub bytes: Vec<u8>,
    /// The files the body is made of: the script first, then what it includes.
    pub parts: Vec<PathBuf>,
    /// What the analysis found (of the expanded body); empty when the file is not UTF-8.
    pub analysis: Analysis,
    /// Every problem, each as `path:line:col: message`.
    pub problems: Vec<String>,
    /// Every warning (what only some servers would refuse), in the same form.
    pub warnings: Vec<String>,
    /// What could be better though nothing is wrong, in the same form: a script that
    /// only reads but is not declared `no-writes` ([`read_only_hint`]). None for a script
    /// with a problem: that comes first.
    pub hints: Vec<String>,
    /// Every call whose command is not a literal, so was not checked, as `path:line:col`.
    pub unchecked: Vec<String>,
    /// Why the file could not be read, when it could not: then it has no digest (an empty
    /// `sha1`) and no analysis, and its one problem says so.
    pub unreadable: Option<String>,
}

/// A directory's `SHA1SUMS` against its files.
#[derive(Clone, Debug, Default)]
pub struct SumsReport {
    /// The file exists.
    pub present: bool,
    /// How many files it lists.
    pub listed: usize,
    /// Every disagreement: a wrong digest, a listed file that is missing, a script
    /// that is not listed, a line that is not `sha1sum` format.
    pub problems: Vec<String>,
}

/// Everything found in one directory (or one file given alone).
#[derive(Clone, Debug)]
pub struct DirReport {
    /// The directory, or the file.
    pub dir: PathBuf,
    /// Its scripts: the `.lua` files of it and its subdirectories that no other script
    /// includes, sorted by path.
    pub scripts: Vec<ScriptReport>,
    /// Its `SHA1SUMS`.
    pub sums: SumsReport,
    /// Problems of the directory itself: no script in it.
    pub problems: Vec<String>,
}

impl DirReport {
    /// How many problems, scripts and `SHA1SUMS` together.
    ///
    /// ```no_run
    /// let report = lockscript_audit::audit::audit_dir("scripts".as_ref())?;
    /// assert_eq!(report.problem_count(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn problem_count(&self) -> usize {
        self.scripts.iter().map(|s| s.problems.len()).sum::<usize>()
            + self.sums.problems.len()
            + self.problems.len()
    }

    /// How many warnings: calls of commands that some servers of the matrix lack.
    ///
    /// ```no_run
    /// let report = lockscript_audit::audit::audit_dir("scripts".as_ref())?;
    /// println!("{} warnings", report.warning_count());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn warning_count(&self) -> usize {
        self.scripts.iter().map(|s| s.warnings.len()).sum()
    }

    /// How many hints: scripts that only read but are not declared `no-writes`.
    ///
    /// ```no_run
    /// let report = lockscript_audit::audit::audit_dir("scripts".as_ref())?;
    /// println!("{} hints", report.hint_count());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn hint_count(&self) -> usize {
        self.scripts.iter().map(|s| s.hints.len()).sum()
    }

    /// How many calls were not checked because their command is not a literal.
    ///
    /// ```no_run
    /// let report = lockscript_audit::audit::audit_dir("scripts".as_ref())?;
    /// println!("{} unchecked calls", report.unchecked_count());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn unchecked_count(&self) -> usize {
        self.scripts.iter().map(|s| s.unchecked.len()).sum()
    }
}

/// Audits every script of `dir` and its subdirectories, and `dir/SHA1SUMS` when
/// present; `dir` may also be a single `.lua` file. Finding no script is a problem.
///
/// ```no_run
/// let report = lockscript_audit::audit::audit_dir("scripts".as_ref())?;
/// for script in &report.scripts {
///     println!("{}  {}", script.sha1, script.name);
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn audit_dir(dir: &Path) -> io::Result<DirReport> {
    if std::fs::metadata(dir)?.is_file() {
        let script = audit_file(dir)?;
        return Ok(DirReport {
            dir: dir.to_path_buf(),
            scripts: vec![script],
            sums: SumsReport::default(),
            problems: Vec::new(),
        });
    }
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        lua_files(entry, &mut files, &mut problems);
    }
    files.sort();
    let mut scripts: Vec<ScriptReport> = files.iter().map(|path| audit_or_report(path)).collect();
    let sums = Sums::read(dir)?;
    // A file another script includes is checked inside that script, not alone: it uses
    // the locals of the file that includes it. Unless SHA1SUMS lists it: then the
    // directory says it is a script too.
    let included: Vec<PathBuf> = scripts
        .iter()
        .flat_map(|s| s.parts.iter().skip(1))
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    scripts.retain(|s| {
        let id = std::fs::canonicalize(&s.path).unwrap_or_else(|_| s.path.clone());
        !included.contains(&id)
            || sums
                .as_ref()
                .is_some_and(|sums| sums.listed.contains_key(&listed_name(dir, &s.path)))
    });
    let sums = sums.map_or_else(SumsReport::default, |sums| sums.check(dir, &scripts));
    if scripts.is_empty() {
        problems.push(format!(
            "{}: no script found (no .lua file here or below)",
            dir.display()
        ));
    }
    Ok(DirReport {
        dir: dir.to_path_buf(),
        scripts,
        sums,
        problems,
    })
}

/// The `.lua` files of a directory entry: the entry itself, or those of a subdirectory
/// and below (not following links to directories, so a loop of links cannot recurse
/// forever). A subdirectory that cannot be read is a problem of the directory.
fn lua_files(
    entry: io::Result<std::fs::DirEntry>,
    out: &mut Vec<PathBuf>,
    problems: &mut Vec<String>,
) {
    let (path, kind) = match entry.and_then(|e| Ok((e.path(), e.file_type()?))) {
        Ok(found) => found,
        Err(e) => {
            problems.push(format!("cannot read a directory entry: {}", reason(&e)));
            return;
        }
    };
    if kind.is_dir() {
        match std::fs::read_dir(&path) {
            Ok(entries) => {
                for entry in entries {
                    lua_files(entry, out, problems);
                }
            }
            Err(e) => problems.push(format!(
                "{}: cannot read the directory: {}",
                path.display(),
                reason(&e)
            )),
        }
    } else if path.extension().is_some_and(|e| e == "lua") && path.is_file() {
        out.push(path);
    }
}

/// The OS's words without its error number ("Input/output error", not "... (os error 5)").
fn reason(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_owned(),
        _ => text,
    }
}

/// Audits one script of a directory: a file that cannot be read is a report with that
/// one problem.
fn audit_or_report(path: &Path) -> ScriptReport {
    audit_file(path).unwrap_or_else(|e| {
        let why = reason(&e);
        ScriptReport {
            path: path.to_path_buf(),
            name: stem(path),
            sha1: String::new(),
            source: String::new(),
            bytes: Vec::new(),
            parts: vec![path.to_path_buf()],
            analysis: Analysis::default(),
            problems: vec![format!("{}: cannot read the file: {why}", path.display())],
            warnings: Vec::new(),
            hints: Vec::new(),
            unchecked: Vec::new(),
            unreadable: Some(why),
        }
    })
}

/// The file stem, the name the runtime gives a script.
fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Audits one script file, with its includes.
///
/// ```no_run
/// let report = lockscript_audit::audit::audit_file("scripts/renew.lua".as_ref())?;
/// assert!(report.problems.is_empty());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn audit_file(path: &Path) -> io::Result<ScriptReport> {
    let name = stem(path);
    let expanded = include::expand(path)?;
    let analysis = lua::analyze(&expanded.text);
    let located = |list: &[lua::Problem]| -> Vec<String> {
        list.iter()
            .map(|p| format!("{}: {}", expanded.place(p.at), p.message))
            .collect()
    };
    let mut problems: Vec<String> = expanded
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.place, p.message))
        .collect();
    problems.extend(located(&analysis.problems));
    let mut warnings = located(&analysis.warnings);
    if let Some(place) = expanded.first_invalid() {
        warnings.insert(
            0,
            format!(
                "{place}: not UTF-8 here: Redis runs the bytes as they are; the checks read \
                 them as text with U+FFFD in place of what is not"
            ),
        );
    }
    let unchecked = analysis
        .unchecked
        .iter()
        .map(|at| expanded.place(*at).to_string())
        .collect();
    let first_line = expanded.place(lua::Position { line: 1, column: 1 });
    // A script with a problem is fixed first; the hint comes after.
    let hints = read_only_hint(&analysis)
        .filter(|_| problems.is_empty())
        .map(|hint| format!("{first_line}: {hint}"))
        .into_iter()
        .collect();
    Ok(ScriptReport {
        path: path.to_path_buf(),
        name,
        sha1: sha1_hex(&expanded.bytes),
        parts: expanded.parts.iter().map(|p| p.path.clone()).collect(),
        source: expanded.text,
        bytes: expanded.bytes,
        analysis,
        problems,
        warnings,
        hints,
        unchecked,
        unreadable: None,
    })
}

/// For a script that is not declared `no-writes`, has no problem, and only reads: calls
/// commands, and certainly none that writes ([`Analysis::writes`]): that the flag would
/// make it read-only.
/// Nothing when a call can't be told (a computed command), so the hint is never wrong
/// about the script.
///
/// ```
/// use lockscript_audit::{audit::read_only_hint, lua::analyze};
///
/// let hint = read_only_hint(&analyze("return redis.call('GET', KEYS[1])")).unwrap();
/// assert!(hint.contains("`#!lua flags=no-writes`"));
/// assert_eq!(read_only_hint(&analyze("return redis.call(ARGV[1], KEYS[1])")), None);
/// ```
pub fn read_only_hint(analysis: &Analysis) -> Option<String> {
    let reads = !analysis.commands.is_empty() && analysis.writes() == Some(false);
    if !reads || analysis.read_only() || !analysis.problems.is_empty() {
        return None;
    }
    let then = "then sent as EVALSHA_RO, which replicas run, and a write added later is refused";
    Some(if analysis.shebang {
        format!(
            "calls no command that writes: `no-writes` among its `#!lua` flags would make it \
             read-only ({then})"
        )
    } else {
        format!(
            "calls no command that writes: `#!lua flags=no-writes` as its first line would \
             make it read-only ({then}; Redis 6.2 reads no shebang)"
        )
    })
}

/// A file's name as `SHA1SUMS` lists it: its path below `dir`, `/`-separated, without
/// `.` components (`./x.lua` is `x.lua`).
fn listed_name(dir: &Path, path: &Path) -> String {
    tidy(&path.strip_prefix(dir).unwrap_or(path).to_string_lossy())
}

/// `./sub/./x.lua` as `sub/x.lua`: what `sha1sum -c` opens is the same file.
fn tidy(name: &str) -> String {
    Path::new(name)
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// A directory's `SHA1SUMS`, read.
struct Sums {
    path: PathBuf,
    /// Each file listed, by [`tidy`] name: its digest.
    listed: BTreeMap<String, String>,
    /// Lines that are not `sha1sum` format, and files listed twice.
    problems: Vec<String>,
}

impl Sums {
    /// `dir/SHA1SUMS`; `None` when there is none.
    fn read(dir: &Path) -> io::Result<Option<Self>> {
        let path = dir.join("SHA1SUMS");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut sums = Self {
            path,
            listed: BTreeMap::new(),
            problems: Vec::new(),
        };
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            // `sha1sum` writes "<digest>  <file>" (text mode) or "<digest> *<file>".
            let parsed = line
                .split_once("  ")
                .or_else(|| line.split_once(" *"))
                .filter(|(d, _)| d.len() == 40 && d.bytes().all(|b| b.is_ascii_hexdigit()));
            match parsed {
                Some((digest, file)) => {
                    let name = tidy(file);
                    if sums
                        .listed
                        .insert(name.clone(), digest.to_ascii_lowercase())
                        .is_some()
                    {
                        sums.problems.push(format!(
                            "{}:{}: {name} is listed twice",
                            sums.path.display(),
                            n + 1
                        ));
                    }
                }
                None => sums.problems.push(format!(
                    "{}:{}: not a sha1sum line: {line:?}",
                    sums.path.display(),
                    n + 1
                )),
            }
        }
        Ok(Some(sums))
    }

    /// Every script against its line, and every line against a script.
    fn check(mut self, dir: &Path, scripts: &[ScriptReport]) -> SumsReport {
        let mut report = SumsReport {
            present: true,
            listed: self.listed.len(),
            problems: std::mem::take(&mut self.problems),
        };
        for script in scripts {
            // Listed by its path below the directory, as `sha1sum` run there writes it.
            let file = listed_name(dir, &script.path);
            match self.listed.remove(&file) {
                // Its own problem says it cannot be read.
                _ if script.unreadable.is_some() => {}
                Some(digest) if digest == script.sha1 => {}
                Some(digest) => report.problems.push(format!(
                    "{}: SHA1SUMS says {digest}, the file is {}: review the change, then update SHA1SUMS",
                    script.path.display(),
                    script.sha1
                )),
                None => report.problems.push(format!(
                    "{}: not listed in SHA1SUMS (add it after review: sha1sum {file} >> SHA1SUMS)",
                    script.path.display()
                )),
            }
        }
        for file in self.listed.keys() {
            report.problems.push(format!(
                "{}: listed in SHA1SUMS but missing",
                dir.join(file).display()
            ));
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::audit_dir;

    fn dir_with(files: &[(&str, &[u8])]) -> tempdir::Dir {
        tempdir::Dir::with(files)
    }

    mod tempdir {
        use std::path::PathBuf;

        /// A throwaway directory under the system temp dir.
        pub(super) struct Dir(pub(super) PathBuf);

        impl Dir {
            pub(super) fn with(files: &[(&str, &[u8])]) -> Self {
                let n: u64 = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
                    .try_into()
                    .unwrap();
                let dir =
                    std::env::temp_dir().join(format!("lock-audit-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                for (name, bytes) in files {
                    std::fs::write(dir.join(name), bytes).unwrap();
                }
                Self(dir)
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn clean_directory_with_matching_sums_has_no_problems() {
        let body: &[u8] = b"return redis.call('GET', KEYS[1])\n";
        let sums = format!("{}  get.lua\n", crate::sha1_hex(body));
        let dir = dir_with(&[
            ("get.lua", body),
            ("SHA1SUMS", sums.as_bytes()),
            ("notes.txt", b"x"),
        ]);
        let report = audit_dir(&dir.0).unwrap();
        assert_eq!(report.scripts.len(), 1);
        assert_eq!(report.scripts[0].name, "get");
        assert_eq!(report.scripts[0].analysis.keys.highest, 1);
        assert!(report.sums.present);
        assert_eq!(report.problem_count(), 0, "{report:?}");
    }

    #[test]
    fn stale_unlisted_and_missing_entries_are_problems() {
        let dir = dir_with(&[
            ("a.lua", b"return 1\n"),
            ("b.lua", b"return 2\n"),
            (
                "SHA1SUMS",
                b"0000000000000000000000000000000000000000  a.lua\n\
                  1111111111111111111111111111111111111111  gone.lua\nnot a line\n",
            ),
        ]);
        let report = audit_dir(&dir.0).unwrap();
        let problems = report.sums.problems.join("\n");
        assert!(problems.contains("a.lua: SHA1SUMS says 0000"), "{problems}");
        assert!(problems.contains("b.lua: not listed"), "{problems}");
        assert!(
            problems.contains("gone.lua: listed in SHA1SUMS but missing"),
            "{problems}"
        );
        assert!(problems.contains("not a sha1sum line"), "{problems}");
        assert_eq!(report.problem_count(), 4);
    }

    #[test]
    fn a_command_some_servers_lack_is_a_warning_not_a_problem() {
        let dir = dir_with(&[(
            "del-if.lua",
            b"return redis.call('DELIFEQ', KEYS[1], ARGV[1])\n",
        )]);
        let report = audit_dir(&dir.0).unwrap();
        assert_eq!(report.problem_count(), 0, "{report:?}");
        assert_eq!(report.warning_count(), 1);
        let warning = &report.scripts[0].warnings[0];
        assert!(
            warning.contains("del-if.lua:1:19: `DELIFEQ` exists from Valkey 9.0.0; Redis "),
            "{warning}"
        );
    }

    #[test]
    fn a_script_that_only_reads_gets_a_hint_unless_it_has_a_problem_or_calls_nothing() {
        let dir = dir_with(&[
            ("peek.lua", b"return redis.call('GET', KEYS[1])\n"),
            ("broken.lua", b"return redis.call('GET', 'config')\n"),
            ("nothing.lua", b"return ARGV[1]\n"),
            (
                "flagged.lua",
                b"#!lua flags=allow-stale\nreturn redis.call('GET', KEYS[1])\n",
            ),
        ]);
        let report = audit_dir(&dir.0).unwrap();
        let hints: Vec<(&str, &Vec<String>)> = report
            .scripts
            .iter()
            .map(|s| (s.name.as_str(), &s.hints))
            .collect();
        assert_eq!(report.hint_count(), 2, "{hints:?}");
        let hint = |name: &str| {
            report
                .scripts
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.hints.first())
                .cloned()
                .unwrap_or_default()
        };
        assert!(
            hint("peek").ends_with(
                "peek.lua:1:1: calls no command that writes: `#!lua flags=no-writes` as its \
                 first line would make it read-only (then sent as EVALSHA_RO, which replicas \
                 run, and a write added later is refused; Redis 6.2 reads no shebang)"
            ),
            "{hints:?}"
        );
        assert!(
            hint("flagged").contains("`no-writes` among its `#!lua` flags"),
            "{hints:?}"
        );
    }

    #[test]
    fn script_problems_carry_file_line_and_column() {
        let dir = dir_with(&[
            ("bad.lua", b"redis.call('SLEEP', 1)\n"),
            ("bin.lua", b"return '\xff'\n"),
        ]);
        let report = audit_dir(&dir.0).unwrap();
        assert!(!report.sums.present);
        let all: Vec<&String> = report.scripts.iter().flat_map(|s| &s.problems).collect();
        assert!(
            all[0].ends_with("bad.lua:1:12: `SLEEP` is not a Redis command"),
            "{all:?}"
        );
        // Redis runs any bytes: a file that is not UTF-8 is a warning, not a problem.
        assert_eq!(all.len(), 1, "{all:?}");
        let bin = report.scripts.iter().find(|s| s.name == "bin").unwrap();
        assert!(
            bin.warnings[0].contains("bin.lua:1:9: not UTF-8 here"),
            "{bin:?}"
        );
        assert_eq!(bin.sha1, crate::sha1_hex(b"return '\xff'\n"));
    }
}
