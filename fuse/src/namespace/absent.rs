//! What the mount knows of directories' names without asking the store: each directory's latest
//! complete listing, kept up with this mount's changes; the names lookups found missing; the names
//! this mount removed — each with when it was learned, so a listing on its way meanwhile is
//! corrected by what happened after it started.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::inode::Kind;

/// A directory's latest complete listing: when it started, and every name it held with its kind,
/// kept up with this mount's own changes since.
#[derive(Debug)]
struct Complete {
    at: Instant,
    names: HashMap<String, Kind>,
}

/// Names by directory, each with when it was learned, at most [`MAX_NAMES`] in all.
#[derive(Debug, Default)]
struct Dated {
    by_dir: HashMap<u64, HashMap<String, Instant>>,
    count: usize,
}

/// Most names a [`Dated`] holds; past that, the older half is dropped.
const MAX_NAMES: usize = 65_536;

impl Dated {
    fn insert(&mut self, dir: u64, name: &str) {
        if self.count >= MAX_NAMES {
            let mut ages: Vec<Instant> = self.by_dir.values().flat_map(|m| m.values().copied()).collect();
            ages.sort();
            let cut = ages[ages.len() / 2];
            self.by_dir.retain(|_, m| {
                m.retain(|_, t| *t > cut);
                !m.is_empty()
            });
            self.count = self.by_dir.values().map(HashMap::len).sum();
        }
        if self.by_dir.entry(dir).or_default().insert(name.to_owned(), Instant::now()).is_none() {
            self.count += 1;
        }
    }

    fn remove(&mut self, dir: u64, name: &str) {
        if let Some(m) = self.by_dir.get_mut(&dir)
            && m.remove(name).is_some()
        {
            self.count -= 1;
            if m.is_empty() {
                self.by_dir.remove(&dir);
            }
        }
    }

    fn get(&self, dir: u64, name: &str) -> Option<Instant> {
        self.by_dir.get(&dir)?.get(name).copied()
    }

    /// Names of `dir` learned at or after `at`.
    fn since(&self, dir: u64, at: Instant) -> impl Iterator<Item = &String> {
        self.by_dir.get(&dir).into_iter().flat_map(move |m| m.iter().filter(move |(_, t)| **t >= at).map(|(n, _)| n))
    }
}

/// See the module's documentation.
#[derive(Debug, Default)]
pub(super) struct Absent {
    /// Per directory: its latest complete listing. A name it does not hold is absent.
    listings: HashMap<u64, Complete>,
    /// Listings held after the last time those of directories the table let go were dropped.
    listings_pruned: usize,
    /// Names a lookup found absent (no object, nothing under them), or that this mount removed
    /// with the DELETE done: the negative entries.
    missed: Dated,
    /// Names this mount removed or moved away, their DELETEs done or queued.
    removed: Dated,
    /// Directories one listing request does not cover: a miss there asks for one key instead.
    pub(super) large: HashSet<u64>,
}

impl Absent {
    /// Whether `name` of `dir` is known absent within `ttl`: missing from a complete listing, or
    /// missed by a lookup, that recent.
    pub(super) fn is_absent(&self, dir: u64, name: &str, ttl: Duration) -> bool {
        let unlisted = self.listings.get(&dir).is_some_and(|c| c.at.elapsed() < ttl && !c.names.contains_key(name));
        unlisted || self.missed.get(dir, name).is_some_and(|at| at.elapsed() < ttl)
    }

    /// Whether `dir` has a complete listing younger than `ttl`.
    pub(super) fn listed_within(&self, dir: u64, ttl: Duration) -> bool {
        self.listings.get(&dir).is_some_and(|c| c.at.elapsed() < ttl)
    }

    /// Names held by `dir`'s latest complete listing.
    pub(super) fn listed_names(&self, dir: u64) -> usize {
        self.listings.get(&dir).map_or(0, |c| c.names.len())
    }

    /// `dir`'s complete listing, if younger than `ttl`: when it started, its names and kinds.
    pub(super) fn listing(&self, dir: u64, ttl: Duration) -> Option<(Instant, Vec<(String, Kind)>)> {
        let c = self.listings.get(&dir).filter(|c| c.at.elapsed() < ttl)?;
        Some((c.at, c.names.iter().map(|(n, k)| (n.clone(), *k)).collect()))
    }

    /// Records `dir`'s complete listing, started at `at`: `names` as the store gave them, with
    /// `made` (names this mount made or moved there since it started) added and the names removed
    /// here or missed by a lookup since then left out. Listings older than `kept` are dropped.
    pub(super) fn complete(
        &mut self,
        dir: u64,
        at: Instant,
        mut names: HashMap<String, Kind>,
        made: Vec<(String, Kind)>,
        kept: Duration,
    ) {
        names.extend(made);
        let gone: Vec<String> = self
            .missed
            .since(dir, at)
            .chain(self.removed.since(dir, at))
            .filter(|n| names.contains_key(*n))
            .cloned()
            .collect();
        for n in gone {
            names.remove(&n);
        }
        self.listings.retain(|_, c| c.at.elapsed() < kept);
        self.listings.insert(dir, Complete { at, names });
    }

    /// Whether the listings held have doubled since the last [`Self::prune`] (from at least 64).
    pub(super) fn prune_due(&self) -> bool {
        self.listings.len() >= 2 * self.listings_pruned.max(32)
    }

    /// The directories listings are held for.
    pub(super) fn listed_dirs(&self) -> Vec<u64> {
        self.listings.keys().copied().collect()
    }

    /// Drops the listings of directories `gone` (the table let them go: a new lookup numbers them
    /// anew).
    pub(super) fn prune(&mut self, gone: &[u64]) {
        for d in gone {
            self.listings.remove(d);
        }
        self.listings_pruned = self.listings.len();
    }

    /// Drops every listing (a DELETE queued behind an unlink failed: a name it left out is back).
    pub(super) fn forget_listings(&mut self) {
        self.listings.clear();
    }

    /// A lookup found `name` of `dir` missing; `negative` says whether it is to be held absent.
    pub(super) fn missed(&mut self, dir: u64, name: &str, negative: bool) {
        self.unlisted(dir, name);
        if negative {
            self.missed.insert(dir, name);
        }
    }

    /// This mount removed `name` from `dir` or moved it away (`done`: its DELETE is done, so it
    /// is absent as if a lookup had missed it).
    pub(super) fn removed(&mut self, dir: u64, name: &str, done: bool, negative: bool) {
        self.unlisted(dir, name);
        self.removed.insert(dir, name);
        if done && negative {
            self.missed.insert(dir, name);
        }
    }

    /// `name` of `dir` is no longer there (found gone): its listing no longer holds it.
    pub(super) fn unlisted(&mut self, dir: u64, name: &str) {
        if let Some(c) = self.listings.get_mut(&dir) {
            c.names.remove(name);
        }
    }

    /// A lookup asked at `asked` found `name` of `dir` as a `kind`: what was learned of it before
    /// then no longer holds, and the listing holds it — unless this mount removed it (or a
    /// lookup missed it) after the lookup was asked.
    pub(super) fn found(&mut self, dir: u64, name: &str, kind: Kind, asked: Instant) {
        if self.missed.get(dir, name).is_some_and(|t| t >= asked)
            || self.removed.get(dir, name).is_some_and(|t| t >= asked)
        {
            return;
        }
        self.present(dir, name, kind);
    }

    /// `name` of `dir` is there now, as a `kind`: made, stored or moved there by this mount.
    pub(super) fn present(&mut self, dir: u64, name: &str, kind: Kind) {
        // Neither missing nor removed from then on (a listing on its way keeps it).
        self.missed.remove(dir, name);
        self.removed.remove(dir, name);
        if let Some(c) = self.listings.get_mut(&dir) {
            c.names.insert(name.to_owned(), kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_corrected_by_what_happened_after_it_started() {
        let mut a = Absent::default();
        let at = Instant::now();
        let listed: HashMap<String, Kind> = ["x", "y", "z"].iter().map(|n| (n.to_string(), Kind::File)).collect();
        a.removed(1, "y", false, true);
        a.missed(1, "z", true);
        a.removed(2, "x", true, true);
        a.complete(1, at, listed, vec![("new".into(), Kind::Dir)], Duration::from_secs(60));
        let (_, mut names) = a.listing(1, Duration::from_secs(60)).unwrap();
        names.sort();
        assert_eq!(names, [("new".to_owned(), Kind::Dir), ("x".to_owned(), Kind::File)]);
        assert!(a.is_absent(1, "y", Duration::from_secs(60)), "not in the listing");
        assert!(!a.is_absent(1, "x", Duration::from_secs(60)));
        assert!(a.listing(1, Duration::ZERO).is_none(), "older than the TTL");
        a.present(1, "y", Kind::File);
        assert!(!a.is_absent(1, "y", Duration::from_secs(60)));
    }

    #[test]
    fn dated_names_stay_bounded() {
        let mut d = Dated::default();
        for k in 0..(MAX_NAMES + 10) {
            d.insert((k % 7) as u64, &k.to_string());
        }
        assert!(d.count <= MAX_NAMES / 2 + 11, "{}", d.count);
        assert_eq!(d.count, d.by_dir.values().map(HashMap::len).sum::<usize>());
        assert!(d.get(((MAX_NAMES + 9) % 7) as u64, &(MAX_NAMES + 9).to_string()).is_some(), "the newest stay");
    }
}
