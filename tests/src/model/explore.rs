//! The search: breadth first over the world's states, each new state's digest kept, and
//! each state rebuilt when its turn comes by running its history again from the start
//! (see the module docs for why). Breadth first, the first violation found comes with a
//! shortest history that shows it.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use super::Config;
use super::property::Property;
use super::world::World;

/// A world the search can walk: the actions it allows in a state, each applied to a
/// copy, states told apart by a digest, and a readable history when one breaks a rule.
pub trait Searched: Sized {
    /// One step of the world.
    type Action: Copy;
    /// The actions allowed now.
    fn enabled(&self) -> Vec<Self::Action>;
    /// Takes one step.
    fn apply(&mut self, action: Self::Action);
    /// What tells this state apart from another.
    fn digest(&self) -> u64;
    /// A copy that goes on alone.
    #[must_use]
    fn fork(&self) -> Self;
    /// The first rule this state breaks: its name and what breaks it.
    fn broken(&self) -> Option<(&'static str, String)>;
    /// The history so far, when kept.
    fn history(&self) -> &[String];
}

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
struct Tree<A> {
    parent: Vec<u32>,
    action: Vec<A>,
    depth: Vec<u16>,
}

impl<A: Copy> Tree<A> {
    /// The actions that lead from the start to state `i`.
    fn path(&self, mut i: usize) -> Vec<A> {
        let mut path = Vec::with_capacity(usize::from(self.depth[i]));
        while i != 0 {
            path.push(self.action[i]);
            i = self.parent[i] as usize;
        }
        path.reverse();
        path
    }

    fn push(&mut self, parent: usize, action: A) -> usize {
        self.parent.push(u32::try_from(parent).unwrap_or(u32::MAX));
        self.action.push(action);
        self.depth.push(self.depth[parent] + 1);
        self.parent.len() - 1
    }
}

/// Searches every history of `config`'s world up to its depth bound, breadth first;
/// stops at the first state that breaks one of its properties.
pub fn explore(config: &Config) -> Report {
    // The instant the model's time 0 stands for, in every run of a history: the machine's
    // instants are then equal in equal states.
    let base = Instant::now();
    search(config.depth, |log| World::new(config, base, log))
}

/// Searches every history of the world `start` builds (with its history kept when asked)
/// up to `depth` actions, breadth first; stops at the first state that breaks a rule.
pub fn search<W: Searched>(depth_bound: usize, start: impl Fn(bool) -> W) -> Report {
    let started = Instant::now();
    let root = start(false);
    let Some(&first) = root.enabled().first() else {
        return Report {
            states: 1,
            transitions: 0,
            depth: 0,
            exhausted: true,
            elapsed: started.elapsed(),
            violation: None,
        };
    };
    let mut tree = Tree {
        parent: vec![0],
        action: vec![first],
        depth: vec![0],
    };
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
        if usize::from(tree.depth[i]) >= depth_bound {
            exhausted = false;
            continue;
        }
        let path = tree.path(i);
        let mut world = Some(replay(&start, &path, false));
        let actions = world.as_ref().map(W::enabled).unwrap_or_default();
        let last = actions.len().saturating_sub(1);
        for (k, &action) in actions.iter().enumerate() {
            // The last action goes on the world rebuilt; the others on forks of it.
            let mut next = match world.take() {
                Some(built) if k == last => built,
                kept => {
                    let fork = kept.as_ref().map(W::fork);
                    world = kept;
                    fork.unwrap_or_else(|| replay(&start, &path, false))
                }
            };
            next.apply(action);
            transitions += 1;
            if let Some((rule, detail)) = next.broken() {
                let mut path = path.clone();
                path.push(action);
                depth = depth.max(path.len());
                let violation = trace(&start, &path, rule, detail);
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
fn replay<W: Searched>(start: &impl Fn(bool) -> W, path: &[W::Action], log: bool) -> W {
    let mut world = start(log);
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

impl Searched for World<'_> {
    type Action = super::world::Action;

    fn enabled(&self) -> Vec<Self::Action> {
        World::enabled(self)
    }

    fn apply(&mut self, action: Self::Action) {
        World::apply(self, action);
    }

    fn digest(&self) -> u64 {
        World::digest(self)
    }

    fn fork(&self) -> Self {
        World::fork(self)
    }

    fn broken(&self) -> Option<(&'static str, String)> {
        broken(self.config, self)
    }

    fn history(&self) -> &[String] {
        World::history(self)
    }
}

/// `path` run again with its history kept.
fn trace<W: Searched>(
    start: &impl Fn(bool) -> W,
    path: &[W::Action],
    rule: &'static str,
    detail: String,
) -> Violation {
    let mut world = start(true);
    // What the clients do at time 0, before the first action.
    let mut history: Vec<String> = (world.history().iter())
        .enumerate()
        .map(|(k, line)| format!("{} {line}", if k == 0 { "  0." } else { "    " }))
        .collect();
    for (step, &action) in path.iter().enumerate() {
        let before = world.history().len();
        world.apply(action);
        for (k, line) in world
            .history()
            .get(before..)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
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
