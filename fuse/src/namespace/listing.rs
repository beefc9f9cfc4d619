//! Open directories: a directory's entries, listed from the store a page at a time as `readdir`
//! reaches them (pages of `page_keys` where the store pages, S3), then the entries that exist only
//! here (files still being written, new empty directories). Offsets are positions in that order and
//! never change while the directory is open.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use object_store::list::PaginatedListOptions;
use object_store::{ListResult, ObjectMeta};

use super::{DIR_MARKER, IsOpen, Namespace, Start};
use crate::attrs::{DirEntry, attr_from_object};
use crate::error::{Error, Result};
use crate::inode::{Attr, Inode, InodeTable, Kind, ROOT, join};

/// Where the store listing stands.
#[derive(Debug)]
enum Next {
    Start,
    Token(String),
    Done,
}

/// One open directory.
#[derive(Debug)]
pub struct Listing {
    ino: u64,
    path: String,
    entries: Vec<DirEntry>,
    seen: HashSet<String>,
    next: Next,
    /// Where its first request started from: what it says holds from then on.
    start: Start,
    /// Answered from the directory's last complete listing, not from the store.
    cached: bool,
}

/// Most pages a lookup miss lists to learn a whole directory (4,000 keys at S3's page size): a
/// burst of creates there then asks nothing more until the negative TTL runs out, where each
/// miss of a larger directory costs a HEAD and a one-key LIST.
pub const WHOLE_PAGES: usize = 4;

/// A listed entry: its name, its kind, and its object (a file's).
type Listed = (String, Kind, Option<ObjectMeta>);

/// A listed page's entries, marker objects (and prefixes under a marker's name, which no name
/// here may take) left out: files first, so a name that is both an
/// object and a prefix (`a` and `a/…`, made by other tools) is the file, as a lookup finds it
/// (docs/SEMANTICS.md; S3 orders the object before the prefix, so no earlier page shows the
/// prefix alone).
fn names(page: ListResult) -> Vec<Listed> {
    let files = page
        .objects
        .into_iter()
        .filter_map(|o| Some((o.location.filename()?.to_owned(), o)))
        .filter(|(n, _)| n != DIR_MARKER)
        .map(|(n, o)| (n, Kind::File, Some(o)));
    let dirs = page
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename())
        .filter(|n| *n != crate::localstore::TMP_DIR && *n != DIR_MARKER)
        .map(|n| (n.to_owned(), Kind::Dir, None));
    files.chain(dirs).collect()
}

impl Namespace {
    /// Records entry `name` of directory `dir` as a listing page requested at `started` showed
    /// it (`object` for a file), `since` being the table's change count then; returns its inode.
    /// An object version this mount wrote or read before gets its known attributes; a version a
    /// lookup described is confirmed by the listing's ETag (its attributes trusted as of the
    /// listing's start) or, with another ETag, left to be asked again. An entry open here is
    /// its opener's and only named.
    #[allow(clippy::too_many_arguments)]
    fn observe_listed(
        &self,
        t: &mut InodeTable,
        dir: u64,
        name: &str,
        kind: Kind,
        object: Option<&ObjectMeta>,
        open_here: bool,
        started: Instant,
        since: u64,
    ) -> Inode {
        let known = object.and_then(|o| self.reader.known(o)).filter(|_| !open_here);
        match (known, t.child(dir, name)) {
            (Some(info), known) => {
                let (kind, attr) = attr_from_object(&info);
                // A later answer about the same version keeps its time.
                let same = known.filter(|i| i.kind == kind && i.attr.etag == attr.etag);
                let at = same.and_then(|i| i.fetched).map_or(started, |f| f.max(started));
                t.observe_at(dir, name, kind, attr, false, since, at)
            }
            (None, Some(i))
                if kind == Kind::File
                    && i.kind != Kind::Dir
                    && !open_here
                    && i.attr.etag.is_some()
                    && object.is_some_and(|o| o.e_tag.is_some()) =>
            {
                let same = object.and_then(|o| o.e_tag.as_ref()) == i.attr.etag.as_ref();
                let fetched = same.then(|| i.fetched.map_or(started, |f| f.max(started)));
                let (kind, attr) = (i.kind, i.attr.clone());
                t.upsert(dir, name, kind, attr, fetched, false)
            }
            // Symlinks list as files until looked up; keep what a lookup learned.
            (None, Some(i))
                if i.kind == kind || matches!(i.kind, Kind::Symlink | Kind::Special(_)) && kind == Kind::File =>
            {
                i.clone()
            }
            _ => t.upsert(dir, name, kind, Attr::empty(), None, false),
        }
    }

    /// Opens directory `ino`: from its latest complete listing while that is younger than the
    /// listing TTL, else its first page is listed now, so a missing or unreadable directory fails
    /// here.
    pub async fn opendir(&self, ino: u64, is_open: IsOpen<'_>) -> Result<u64> {
        let dir = self.inode(ino)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        let mut l = Listing {
            ino,
            path: dir.path,
            entries: Vec::new(),
            seen: HashSet::new(),
            next: Next::Start,
            start: self.listing_start(),
            cached: false,
        };
        match self.cached_listing(ino) {
            Some((_, names)) => self.list_cached(&mut l, names, is_open),
            None => self.list_more(&mut l, is_open).await?,
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().expect("dirs lock").insert(fh, Arc::new(tokio::sync::Mutex::new(l)));
        Ok(fh)
    }

    /// Entries of an open directory from position `offset` ("." and ".." come first), listing
    /// further pages only as far as this call needs.
    pub async fn readdir(&self, fh: u64, ino: u64, offset: u64, is_open: IsOpen<'_>) -> Result<Vec<(u64, DirEntry)>> {
        Ok(self.entries_at(fh, ino, offset, is_open).await?.0)
    }

    /// [`Self::readdir`], and whether the entries come from the directory's last complete listing
    /// rather than from the store.
    async fn entries_at(
        &self,
        fh: u64,
        ino: u64,
        offset: u64,
        is_open: IsOpen<'_>,
    ) -> Result<(Vec<(u64, DirEntry)>, bool)> {
        let listing = self.dirs.lock().expect("dirs lock").get(&fh).cloned().ok_or(Error::Stale)?;
        let mut l = listing.lock().await;
        let offset = offset as usize;
        let batch = self.cfg.readdir_batch;
        while l.entries.len() + 2 < offset + batch && !matches!(l.next, Next::Done) {
            self.list_more(&mut l, is_open).await?;
        }
        let parent = self.inode(ino)?.parent;
        let dots = [
            DirEntry { ino, kind: Kind::Dir, name: ".".into() },
            DirEntry { ino: if parent == 0 { ROOT } else { parent }, kind: Kind::Dir, name: "..".into() },
        ];
        let out = (offset..(l.entries.len() + 2).min(offset + batch))
            .map(|i| {
                let e = if i < 2 { dots[i].clone() } else { l.entries[i - 2].clone() };
                (i as u64 + 1, e)
            })
            .collect();
        Ok((out, l.cached))
    }

    /// [`Self::readdir`] with each entry's inode (READDIRPLUS): the attributes of entries not
    /// known fresh are fetched first, `prefetch_concurrency` at a time — a HEAD per file (its
    /// recorded attributes, the footer only for objects without a record) and per directory (its
    /// marker) — and every entry but "." and ".." counts a kernel lookup. An entry whose object
    /// went away since the listing is left out. An entry whose attributes cannot be fetched is
    /// shown with what is known when the store has just listed it, and fails the call when the
    /// listing came from the last one (nothing then says it is still there).
    pub async fn readdirplus(
        &self,
        fh: u64,
        ino: u64,
        offset: u64,
        is_open: IsOpen<'_>,
    ) -> Result<Vec<(u64, DirEntry, Inode)>> {
        use futures::StreamExt;
        let (entries, cached) = self.entries_at(fh, ino, offset, is_open).await?;
        // The kernel gets every entry's attributes here: no lookups to prefetch for.
        self.listed.lock().expect("listed lock").remove(&ino);
        let dir = self.inode(ino)?;
        let dots = |e: &DirEntry| e.name == "." || e.name == "..";
        let stale: Vec<(String, Option<Inode>)> = {
            let t = self.table();
            entries
                .iter()
                .filter(|(_, e)| !dots(e))
                .filter_map(|(_, e)| {
                    let known = t.child(ino, &e.name);
                    let trusted = known.is_some_and(|i| self.fresh(i) || is_open(i.ino));
                    (!trusted).then(|| (e.name.clone(), known.cloned()))
                })
                .collect()
        };
        let since = self.table().changes();
        let fetches = futures::stream::iter(stale)
            .map(|(name, known)| {
                let rel = join(&dir.path, &name);
                async move {
                    let got = match known.as_ref().map(|k| k.kind) {
                        Some(Kind::Dir) => self.dir_attr(&rel).await.map(|a| Some((Kind::Dir, a))),
                        _ => {
                            let had = known.as_ref().filter(|k| k.fetched.is_some()).map(|k| (k.kind, &k.attr));
                            self.stat_attrs(&self.key(&rel), had).await
                        }
                    };
                    (name, got)
                }
            })
            .buffer_unordered(self.cfg.prefetch_concurrency.max(1));
        let mut fetched = fetches.collect::<Vec<_>>().await;
        // Nothing but the store can say a kept listing's entry is still there: a store that
        // cannot answer fails the listing, as it would fail listing the directory.
        let unanswered = |got: &Result<_>| matches!(got, Err(Error::Store(_) | Error::Local(_)));
        if cached && let Some(k) = fetched.iter().position(|(_, got)| unanswered(got)) {
            return fetched.swap_remove(k).1.map(|_| Vec::new());
        }
        let mut t = self.table();
        // Answers about the directory's old path say nothing of its entries now.
        let moved = t.get(ino).is_none_or(|d| d.path != dir.path);
        for (name, got) in fetched {
            match got {
                Ok(Some((kind, attr))) => {
                    t.observe(ino, &name, kind, attr, false, since);
                }
                Ok(None) if moved => {}
                // Gone since the listing: no entry (the next listing agrees).
                Ok(None) => {
                    t.observe_gone(ino, &name, since);
                    if t.child(ino, &name).is_none() {
                        self.unlisted(ino, &name);
                    }
                }
                // Shown with what is known; a lookup asks again.
                Err(e) => tracing::debug!(name, error = %e, "attributes of a listed entry"),
            }
        }
        let mut out = Vec::with_capacity(entries.len());
        for (off, e) in entries {
            if dots(&e) {
                let Some(i) = t.get(e.ino).cloned() else { continue };
                out.push((off, e, i));
                continue;
            }
            let Some(ino) = t.child(ino, &e.name).map(|i| i.ino) else { continue };
            let Some(i) = t.looked_up(ino) else { continue };
            out.push((off, DirEntry { ino: i.ino, kind: i.kind, name: e.name }, i));
        }
        Ok(out)
    }

    /// Up to `n` keys under directory `rel` (at any depth): enough to tell whether it exists or is
    /// empty without listing it all.
    pub async fn first_keys(&self, rel: &str, n: usize) -> Result<Vec<object_store::path::Path>> {
        let prefix = self.key(rel);
        if let Some(pages) = &self.bucket.pages {
            let under = (!prefix.as_ref().is_empty()).then(|| format!("{prefix}/"));
            // A page may hold fewer keys than asked for (a store layer may leave some out).
            let (mut keys, mut token) = (Vec::new(), None);
            loop {
                let opts =
                    PaginatedListOptions { max_keys: Some(n - keys.len()), page_token: token, ..Default::default() };
                let got = pages.list_paginated(under.as_deref(), opts).await?;
                keys.extend(got.result.objects.into_iter().map(|o| o.location));
                token = got.page_token;
                if keys.len() >= n || token.is_none() {
                    return Ok(keys.into_iter().take(n).collect());
                }
            }
        }
        use futures::TryStreamExt;
        let mut keys = Vec::new();
        let mut list = self.bucket.store.list(Some(&prefix));
        while keys.len() < n {
            match list.try_next().await? {
                Some(o) => keys.push(o.location),
                None => break,
            }
        }
        Ok(keys)
    }

    /// Lists directory `dir` (at `rel`) once, if at most [`WHOLE_PAGES`] requests cover it, and
    /// records what it holds as a complete listing (names missing from it are then absent for the
    /// negative TTL). With `confirm` (what is open here), the attributes of the files it lists
    /// that are known here are confirmed or dropped by it too (see [`Self::observe_listed`]).
    /// Returns the names of its subdirectories, `None` when those pages did not cover it (the
    /// directory is then marked large, and not listed whole again).
    pub(crate) async fn list_whole(
        &self,
        dir: u64,
        rel: &str,
        confirm: Option<IsOpen<'_>>,
    ) -> Result<Option<HashSet<String>>> {
        let prefix = self.key(rel);
        let start = self.listing_start();
        let (started, since) = (start.at, start.since);
        // Each page with when its request was sent: what it shows holds from then.
        let pages_got = match &self.bucket.pages {
            Some(pages) => {
                let under = (!prefix.as_ref().is_empty()).then(|| format!("{prefix}/"));
                let mut all = Vec::new();
                let mut token = None;
                for _ in 0..WHOLE_PAGES {
                    let opts = PaginatedListOptions {
                        delimiter: Some("/".into()),
                        max_keys: Some(self.cfg.page_keys),
                        page_token: token.take(),
                        ..Default::default()
                    };
                    let sent = Instant::now();
                    let got = pages.list_paginated(under.as_deref(), opts).await?;
                    all.push((sent, got.result));
                    token = got.page_token;
                    if token.is_none() {
                        break;
                    }
                }
                if token.is_some() {
                    // Larger than a whole listing is worth: not tried again.
                    self.absent().large.insert(dir);
                    return Ok(None);
                }
                all
            }
            None => vec![(started, self.bucket.store.list_with_delimiter(Some(&prefix)).await?)],
        };
        let listed: Vec<(Instant, Listed)> =
            pages_got.into_iter().flat_map(|(at, page)| names(page).into_iter().map(move |e| (at, e))).collect();
        if let Some(is_open) = confirm {
            let mut t = self.table();
            let mut seen = HashSet::new();
            for (at, (name, kind, object)) in &listed {
                // As an open directory shows it: the first of a name (a file before a directory).
                if !seen.insert(name) {
                    continue;
                }
                // Only what is known is confirmed: the rest is named when a lookup asks for it.
                if let Some(c) = t.child(dir, name).filter(|c| c.kind != Kind::Dir) {
                    let open_here = is_open(c.ino);
                    self.observe_listed(&mut t, dir, name, *kind, object.as_ref(), open_here, *at, since);
                }
            }
        }
        // A name listed as a file and as a directory is the file (as an open directory shows it).
        let mut kinds = HashMap::with_capacity(listed.len());
        for (_, (name, kind, _)) in listed {
            kinds.entry(name).or_insert(kind);
        }
        let dirs: HashSet<String> = kinds.iter().filter(|(_, k)| **k == Kind::Dir).map(|(n, _)| n.clone()).collect();
        self.subdirs_counted(dir, dirs.len());
        self.listed_completely(dir, Some(rel), start, kinds);
        Ok(Some(dirs))
    }

    /// Forgets an open directory.
    pub fn releasedir(&self, fh: u64) {
        self.dirs.lock().expect("dirs lock").remove(&fh);
    }

    /// Fills `l` from the directory's latest complete listing (`names`, kept up with this mount's
    /// changes), and the entries only this mount has: nothing is asked of the store.
    /// The entries' attributes are trusted as [`Self::readdirplus`] says (fetched when not fresh).
    fn list_cached(&self, l: &mut Listing, mut names: Vec<(String, Kind)>, is_open: IsOpen<'_>) {
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let mut files = Vec::new();
        let mut t = self.table();
        let local: Vec<(String, Kind)> = t
            .children(l.ino)
            .filter(|c| is_open(c.ino) || c.kind == Kind::Dir && c.fetched.is_none())
            .map(|c| (c.name.clone(), c.kind))
            .collect();
        for (name, kind) in names.into_iter().chain(local) {
            if !l.seen.insert(name.clone()) {
                continue;
            }
            // What the table knows of the name is newer than the listing's kind.
            let i = match t.child(l.ino, &name) {
                Some(i) => i.clone(),
                None => t.upsert(l.ino, &name, kind, Attr::empty(), None, false),
            };
            if i.kind != Kind::Dir && i.fetched.is_none() {
                files.push(name.clone());
            }
            l.entries.push(DirEntry { ino: i.ino, kind: i.kind, name });
        }
        drop(t);
        l.next = Next::Done;
        l.cached = true;
        self.listed.lock().expect("listed lock").insert(l.ino, files);
    }

    /// Lists the next page into `l`; after the last one, adds the entries only this mount has.
    async fn list_more(&self, l: &mut Listing, is_open: IsOpen<'_>) -> Result<()> {
        let prefix = self.key(&l.path);
        let first = matches!(l.next, Next::Start);
        let since = self.table().changes();
        // What this page shows holds from when its request was sent.
        let sent = Instant::now();
        let mut page = match (&self.bucket.pages, &l.next) {
            (_, Next::Done) => return Ok(()),
            (Some(pages), next) => {
                let token = match next {
                    Next::Token(t) => Some(t.clone()),
                    _ => None,
                };
                let opts = PaginatedListOptions {
                    delimiter: Some("/".into()),
                    max_keys: Some(self.cfg.page_keys),
                    page_token: token,
                    ..Default::default()
                };
                let under = (!prefix.as_ref().is_empty()).then(|| format!("{prefix}/"));
                let got = pages.list_paginated(under.as_deref(), opts).await?;
                l.next = got.page_token.map_or(Next::Done, Next::Token);
                names(got.result)
            }
            (None, _) => {
                let got = self.bucket.store.list_with_delimiter(Some(&prefix)).await?;
                l.next = Next::Done;
                let mut all = names(got);
                all.sort_by(|a, b| a.0.cmp(&b.0));
                all
            }
        };
        if matches!(l.next, Next::Done) {
            let t = self.table();
            let mut local: Vec<(String, Kind, Option<ObjectMeta>)> = t
                .children(l.ino)
                .filter(|c| is_open(c.ino) || c.kind == Kind::Dir && c.fetched.is_none())
                .map(|c| (c.name.clone(), c.kind, None))
                .collect();
            local.sort_by(|a, b| a.0.cmp(&b.0));
            page.extend(local);
        }
        let mut files = Vec::new();
        let mut t = self.table();
        for (name, kind, object) in page {
            if !l.seen.insert(name.clone()) {
                continue;
            }
            let open_here = t.child(l.ino, &name).is_some_and(|c| is_open(c.ino));
            let i = self.observe_listed(&mut t, l.ino, &name, kind, object.as_ref(), open_here, sent, since);
            if i.kind != Kind::Dir && i.fetched.is_none() {
                files.push(name.clone());
            }
            l.entries.push(DirEntry { ino: i.ino, kind: i.kind, name });
        }
        drop(t);
        if matches!(l.next, Next::Done) {
            self.subdirs_counted(l.ino, l.entries.iter().filter(|e| e.kind == Kind::Dir).count());
            let kinds = l.entries.iter().map(|e| (e.name.clone(), e.kind)).collect();
            self.listed_completely(l.ino, Some(&l.path), l.start, kinds);
        }
        // The first lookup in this directory fetches these files' attributes together (`ls -l`).
        let mut listed = self.listed.lock().expect("listed lock");
        if first {
            listed.insert(l.ino, files);
        } else {
            listed.entry(l.ino).or_default().extend(files);
        }
        Ok(())
    }
}
