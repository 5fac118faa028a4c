//! The layering `src/lib.rs` states, and no import cycle between two files of `src/`.
//!
//! Read from the source text, as a reviewer would (no dependency on a parser): every
//! `crate::a::b` and `super::a` path outside a file's `#[cfg(test)]` part is an import of the
//! deepest module file it names. Comments count too: a doc comment that points at another file
//! by path is a reader's dependency, and it is how the review tool (`modgraph.py`) reads them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every `.rs` file under the main crate's `src/` as its module path, but unit tests.
fn modules() -> BTreeMap<Module, PathBuf> {
    modules_of("src")
}

/// Every `.rs` file under `<dir>` (a crate's `src/`, from the workspace root) as its module path,
/// but unit tests (`tests.rs`, `tests/`).
fn modules_of(dir: &str) -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().unwrap() != "tests" {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") && p.file_stem().unwrap() != "tests"
            {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap().with_extension("");
            let mut m: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if ["mod", "lib", "main"].contains(&m.last().unwrap().as_str()) {
                m.pop();
            }
            (m, f)
        })
        .collect()
}

/// The text of a file without its inline unit-test module (`#[cfg(test)] mod tests { ... }`,
/// conventionally last). Other `#[cfg(test)]` items (a test-only constructor, `mod tests;`)
/// stay: cutting at them would hide the rest of the file.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]") {
        let at = from + i;
        let next = text[at + "#[cfg(test)]".len()..].trim_start();
        let line = next.lines().next().unwrap_or("");
        if line.starts_with("mod ") && line.trim_end().ends_with('{') {
            return text[..at].to_string();
        }
        from = at + 1;
    }
    text
}

/// `(crate|super)::a::b...` paths in `text`: the keyword and the segments after it.
fn paths(text: &str) -> Vec<(&str, Vec<&str>)> {
    let mut out = Vec::new();
    for kw in ["crate", "super"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(kw) {
            let at = from + i;
            from = at + kw.len();
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut segs = Vec::new();
            let mut rest = &text[from..];
            while let Some(r) = rest.strip_prefix("::") {
                let n = r
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(r.len());
                if n == 0 || !r.starts_with(|c: char| c.is_alphabetic() || c == '_') {
                    break;
                }
                segs.push(&r[..n]);
                rest = &r[n..];
            }
            if !segs.is_empty() {
                out.push((kw, segs));
            }
        }
    }
    out
}

/// The file-level import graph.
fn graph(mods: &BTreeMap<Module, PathBuf>) -> BTreeMap<Module, BTreeSet<Module>> {
    let resolve = |parts: Vec<String>| -> Option<Module> {
        (1..=parts.len())
            .rev()
            .map(|n| parts[..n].to_vec())
            .find(|m| mods.contains_key(m))
    };
    mods.iter()
        .map(|(m, f)| {
            let text = code(f);
            let mut to = BTreeSet::new();
            for (kw, segs) in paths(&text) {
                let segs: Vec<String> = segs.iter().map(|s| s.to_string()).collect();
                let target = if kw == "crate" {
                    resolve(segs)
                } else {
                    // `super` of a file is its folder's module; what modgraph.py does for both.
                    let mut base = m[..m.len().saturating_sub(1)].to_vec();
                    base.extend(segs);
                    resolve(base)
                };
                if let Some(t) = target.filter(|t| t != m && !t.is_empty()) {
                    to.insert(t);
                }
            }
            (m.clone(), to)
        })
        .collect()
}

/// Sets of files that import each other, directly or through others (Tarjan's SCC).
fn cycles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    impl<'a> T<'a> {
        fn strong(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.strong(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v, l);
                } else if self.on.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on.remove(w);
                    comp.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            t.strong(v);
        }
    }
    t.out
}

/// The main crate and the crates of its generated code (`crates/*/src`): a cycle inside the
/// slurmrestd crate is as hard to read as one in `src/`.
#[test]
fn no_two_files_of_src_import_each_other() {
    let crates = ["src", "crates/slurmrestd/src", "crates/proto/src"];
    let found: Vec<String> = crates
        .iter()
        .flat_map(|dir| cycles(&graph(&modules_of(dir))))
        .collect::<Vec<_>>()
        .iter()
        .map(|c| {
            c.iter()
                .map(|m| m.join("/"))
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles (move what both need into a file of its own, or name a file in a \
         comment without a `crate::`/`super::` path):\n{}",
        found.join("\n")
    );
}

/// The order `lib.rs` promises, read from its "Dependencies between the modules" paragraph.
fn stated_order() -> Vec<String> {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let para: String = lib
        .lines()
        .skip_while(|l| !l.contains("Dependencies between the modules"))
        .take_while(|l| l.starts_with("//!") && l.trim() != "//!")
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!para.is_empty(), "lib.rs states the layering");
    let para = &para[..para.find("(`tests/").unwrap_or(para.len())];
    para.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn each_top_level_module_imports_only_those_lib_rs_lists_before_it() {
    let order = stated_order();
    let mods = modules();
    let tops: BTreeSet<&str> = mods
        .keys()
        .filter_map(|m| m.first().map(String::as_str))
        .collect();
    assert_eq!(
        tops,
        order.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        "lib.rs's order must name every top-level module of src/ (stated: {order:?})"
    );
    let rank = |name: &str| order.iter().position(|o| o == name);
    let mut wrong = Vec::new();
    for (m, f) in &mods {
        let Some(top) = m.first() else { continue };
        for (kw, segs) in paths(&code(f)) {
            if kw != "crate" {
                continue;
            }
            if let (Some(from), Some(to)) = (rank(top), rank(segs[0]))
                && to > from
            {
                wrong.push(format!(
                    "{}: {top} imports {} (crate::{})",
                    f.display(),
                    segs[0],
                    segs.join("::")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against lib.rs's order {order:?}:\n{}",
        wrong.join("\n")
    );
}
