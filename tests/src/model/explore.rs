//! The search: breadth first over the world's states, each new state's digest kept, and
//! each state rebuilt when its turn comes by running its history again from the start
//! (see the module docs for why). Breadth first, the first violation found comes with a
//! shortest history that shows it.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use super::Config;
use super::property::Property;
use super::world::{Action, World};

/// What a search found.
#[derive(Debug)]
pub struct Report {
    /// Distinct states reached (by digest).
    pub states: usize,
    /// Actions tried (transitions, including those to states seen before).
    pub transitions: u64,
    /// The longest history explored, in actions.
    pub depth: usize,
    /// Whether every state was expanded: no history was cut at the depth bound (the
    /// clock's horizon bounds the world).
    pub exhausted: bool,
    /// How long the search took.
    pub elapsed: Duration,
    /// The first broken rule found, with its history.
    pub violation: Option<Violation>,
}

/// A broken rule and a shortest history that breaks it.
#[derive(Debug)]
pub struct Violation {
    /// The property's name, or what the machine did that it must not.
    pub rule: &'static str,
    /// What breaks it, in the violating state.
    pub detail: String,
    /// The history's length in actions.
    pub actions: usize,
    /// The history, readable: one numbered entry per action.
    pub history: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} states, {} transitions, depth {}{}, {:.1} s",
            self.states,
            self.transitions,
            self.depth,
            if self.exhausted {
                " (every state expanded)"
            } else {
                " (cut at the depth bound)"
            },
            self.elapsed.as_secs_f64()
        )?;
        if let Some(v) = &self.violation {
            write!(f, "\n{v}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "VIOLATION of {}: {}\nshortest history ({} actions):",
            self.rule, self.detail, self.actions
        )?;
        for line in &self.history {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// The states found so far, each by the state it was first reached from.
struct Tree {
    parent: Vec<u32>,
    action: Vec<Action>,
    depth: Vec<u16>,
}

impl Tree {
    /// The actions that lead from the start to state `i`.
    fn path(&self, mut i: usize) -> Vec<Action> {
        let mut path = Vec::with_capacity(usize::from(self.depth[i]));
        while i != 0 {
            path.push(self.action[i]);
            i = self.parent[i] as usize;
        }
        path.reverse();
        path
    }

    fn push(&mut self, parent: usize, action: Action) -> usize {
        self.parent.push(u32::try_from(parent).unwrap_or(u32::MAX));
        self.action.push(action);
        self.depth.push(self.depth[parent] + 1);
        self.parent.len() - 1
    }
}

/// Searches every history of `config`'s world up to its depth bound, breadth first;
/// stops at the first state that breaks one of its properties.
pub fn explore(config: &Config) -> Report {
    let started = Instant::now();
    // The instant the model's time 0 stands for, in every run of a history: the machine's
    // instants are then equal in equal states.
    let base = Instant::now();
    let mut tree = Tree {
        parent: vec![0],
        action: vec![Action::Tick],
        depth: vec![0],
    };
    let root = World::new(config, base, false);
    let mut seen = HashSet::from([root.digest()]);
    let mut queue = VecDeque::from([0usize]);
    let (mut transitions, mut depth, mut exhausted) = (0u64, 0usize, true);
    let report = |seen: &HashSet<u64>, transitions, depth, exhausted, violation| Report {
        states: seen.len(),
        transitions,
        depth,
        exhausted,
        elapsed: started.elapsed(),
        violation,
    };
    while let Some(i) = queue.pop_front() {
        if usize::from(tree.depth[i]) >= config.depth {
            exhausted = false;
            continue;
        }
        let path = tree.path(i);
        let mut world = Some(replay(config, base, &path, false));
        let actions = world.as_ref().map(World::enabled).unwrap_or_default();
        let last = actions.len().saturating_sub(1);
        for (k, &action) in actions.iter().enumerate() {
            // The last action goes on the world rebuilt; the others on forks of it.
            let mut next = match world.take() {
                Some(built) if k == last => built,
                kept => {
                    let fork = kept.as_ref().map(World::fork);
                    world = kept;
                    fork.unwrap_or_else(|| replay(config, base, &path, false))
                }
            };
            next.apply(action);
            transitions += 1;
            if let Some((rule, detail)) = broken(config, &next) {
                let mut path = path.clone();
                path.push(action);
                depth = depth.max(path.len());
                let violation = trace(config, base, &path, rule, detail);
                return report(&seen, transitions, depth, exhausted, Some(violation));
            }
            if seen.insert(next.digest()) {
                let child = tree.push(i, action);
                depth = depth.max(usize::from(tree.depth[child]));
                queue.push_back(child);
            }
        }
    }
    report(&seen, transitions, depth, exhausted, None)
}

/// The world after `path`, from the start.
fn replay<'c>(config: &'c Config, base: Instant, path: &[Action], log: bool) -> World<'c> {
    let mut world = World::new(config, base, log);
    for &action in path {
        world.apply(action);
    }
    world
}

/// The first rule `world` breaks: the machine's own, then the properties in order.
fn broken(config: &Config, world: &World<'_>) -> Option<(&'static str, String)> {
    if let Some(b) = &world.broken {
        return Some((b.what, b.detail.clone()));
    }
    Property::ALL
        .into_iter()
        .filter(|p| config.properties.contains(p))
        .find_map(|p| p.broken(world).map(|detail| (p.name(), detail)))
}

/// `path` run again with its history kept.
fn trace(
    config: &Config,
    base: Instant,
    path: &[Action],
    rule: &'static str,
    detail: String,
) -> Violation {
    let mut world = World::new(config, base, true);
    // What the clients do at time 0, before the first action.
    let mut history: Vec<String> = (world.history().iter())
        .enumerate()
        .map(|(k, line)| format!("{} {line}", if k == 0 { "  0." } else { "    " }))
        .collect();
    for (step, &action) in path.iter().enumerate() {
        let before = world.history().len();
        world.apply(action);
        for (k, line) in world.lines_since(before).iter().enumerate() {
            let number = if k == 0 {
                format!("{:>3}.", step + 1)
            } else {
                String::from("    ")
            };
            history.push(format!("{number} {line}"));
        }
    }
    Violation {
        rule,
        detail,
        actions: path.len(),
        history,
    }
}
