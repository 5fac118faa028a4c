//! Image mapping: a cluster's rules that turn a task's image reference into an image file
//! pre-staged on the cluster (an Enroot `.sqsh` for Pyxis, a `.sif` for Apptainer), so the jobs
//! of a 1000-task map do not each pull from the registry.
//!
//! ```toml
//! [[clusters.hpc1.images]]
//! match = "ghcr.io/org/*"                       # a glob: `*` is any run of characters
//! pyxis = "/shared/images/{flat}.sqsh"          # ghcr.io/org/train:1.0 -> /shared/images/org+train+1.0.sqsh
//! apptainer = "/shared/images/{flat}.sif"
//! ```
//!
//! Rules are tried in order; the first that matches and names a path for the task's runtime
//! applies. An image no rule maps keeps its registry reference (as rendered without mapping);
//! an image that is a path already (`/...`, `./...`) is never mapped.
//! Placeholders (see [`PLACEHOLDERS`]) are checked when the file is read, so a typo fails at
//! start, not at the first task.

use serde::Deserialize;

use crate::domain::site::Runtime;

/// The placeholders a path template may use, each with what it stands for (docs quote these).
pub const PLACEHOLDERS: &[(&str, &str)] = &[
    ("ref", "the whole reference, `ghcr.io/org/train:1.0`"),
    (
        "registry",
        "the registry host, `ghcr.io` (empty when the reference names none)",
    ),
    (
        "repository",
        "the path without registry and tag, `org/train`",
    ),
    ("name", "the repository's last component, `train`"),
    (
        "tag",
        "the tag, `1.0` (a digest's hex when pinned by `@sha256:...`; `latest` when neither)",
    ),
    (
        "flat",
        "repository and tag joined by `+`, `org+train+1.0` (one file name per image)",
    ),
    (
        "1",
        "... `{9}`: what the pattern's first ... ninth `*` matched",
    ),
];

/// One `[[clusters.NAME.images]]` entry as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileImageRule {
    #[serde(rename = "match")]
    pub pattern: String,
    pub pyxis: Option<String>,
    pub apptainer: Option<String>,
}

/// A checked rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageRule {
    pattern: String,
    pyxis: Option<String>,
    apptainer: Option<String>,
}

/// A cluster's rules, in order (empty: every image keeps its reference).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageMap {
    rules: Vec<ImageRule>,
}

/// A task image resolved to a pre-staged file.
#[derive(Debug, Clone, PartialEq)]
pub struct StagedImage {
    /// The file on the cluster.
    pub path: String,
    /// The task's reference, and the rule's pattern that mapped it (for messages).
    pub reference: String,
    pub pattern: String,
}

impl ImageMap {
    /// Checks the file's rules (`key`: where they are, for messages).
    pub fn from_file(key: &str, rules: Vec<FileImageRule>) -> Result<ImageMap, String> {
        let mut out = Vec::new();
        for (i, r) in rules.into_iter().enumerate() {
            let at = format!("{key}[{i}]");
            if r.pattern.is_empty() || r.pattern.chars().any(char::is_whitespace) {
                return Err(format!(
                    "{at}.match: `{}` must be a non-empty image pattern without spaces, e.g. \"ghcr.io/org/*\"",
                    r.pattern
                ));
            }
            let stars = r.pattern.matches('*').count();
            if stars > 9 {
                return Err(format!(
                    "{at}.match: `{}` has {stars} `*`; at most 9 (`{{1}}` ... `{{9}}`)",
                    r.pattern
                ));
            }
            if r.pyxis.is_none() && r.apptainer.is_none() {
                return Err(format!(
                    "{at}: set `pyxis` and/or `apptainer` to the pre-staged file's path, e.g. \
                     pyxis = \"/shared/images/{{flat}}.sqsh\""
                ));
            }
            for (field, t) in [("pyxis", &r.pyxis), ("apptainer", &r.apptainer)] {
                if let Some(t) = t {
                    check_template(t, stars).map_err(|p| format!("{at}.{field}: `{t}`: {p}"))?;
                }
            }
            out.push(ImageRule {
                pattern: r.pattern,
                pyxis: r.pyxis,
                apptainer: r.apptainer,
            });
        }
        Ok(ImageMap { rules: out })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The pre-staged file for `reference` under `runtime`; `Ok(None)`: no rule maps it.
    /// An error: a rule matched but its path came out unusable (a capture with `..`, say).
    pub fn resolve(
        &self,
        reference: &str,
        runtime: Runtime,
    ) -> Result<Option<StagedImage>, String> {
        // A file already (`/shared/images/x.sqsh`, `./x.sif`): nothing to map.
        if reference.starts_with('/') || reference.starts_with("./") {
            return Ok(None);
        }
        // Pyxis' `registry#image` names the same image as `registry/image`.
        let normalized = reference.replacen('#', "/", 1);
        for r in &self.rules {
            let template = match runtime {
                Runtime::Pyxis => &r.pyxis,
                Runtime::Apptainer => &r.apptainer,
            };
            let Some(template) = template else { continue };
            let Some(captures) = glob(&r.pattern, &normalized) else {
                continue;
            };
            let parts = Parts::of(&normalized);
            let path = substitute(template, &parts, &captures);
            check_path(&path).map_err(|p| {
                format!(
                    "image `{reference}` maps to `{}` by the rule `{}`, which {p}; fix the rule in the \
                     connector's config file or the image reference",
                    path.escape_default(),
                    r.pattern
                )
            })?;
            return Ok(Some(StagedImage {
                path,
                reference: reference.to_string(),
                pattern: r.pattern.clone(),
            }));
        }
        Ok(None)
    }
}

/// The pieces of an image reference the placeholders name.
struct Parts<'a> {
    reference: &'a str,
    registry: &'a str,
    repository: &'a str,
    tag: &'a str,
}

impl<'a> Parts<'a> {
    fn of(reference: &'a str) -> Parts<'a> {
        let (registry, rest) = match reference.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first, rest)
            }
            _ => ("", reference),
        };
        let (repository, tag) = if let Some((repo, digest)) = rest.split_once('@') {
            (repo, digest.rsplit(':').next().unwrap_or(digest))
        } else {
            // A tag's `:` comes after the last `/` (a registry port's does not: it is gone).
            match rest.rsplit_once(':') {
                Some((repo, tag)) if !tag.contains('/') => (repo, tag),
                _ => (rest, "latest"),
            }
        };
        Parts {
            reference,
            registry,
            repository,
            tag,
        }
    }
}

/// `*` matches any run of characters (also `/`); everything else itself. Returns the captures.
fn glob<'a>(pattern: &str, text: &'a str) -> Option<Vec<&'a str>> {
    fn go<'a>(pat: &[&str], text: &'a str, caps: &mut Vec<&'a str>) -> bool {
        let Some((first, rest)) = pat.split_first() else {
            return text.is_empty();
        };
        // `pat` alternates literal, star, literal, ...: `first` is the literal before a star.
        let Some(after) = text.strip_prefix(first) else {
            return false;
        };
        if rest.is_empty() {
            return after.is_empty();
        }
        // The star: shortest capture first (as a regex's lazy `.*?`), backtracking.
        for end in (0..=after.len()).filter(|e| after.is_char_boundary(*e)) {
            caps.push(&after[..end]);
            if go(rest, &after[end..], caps) {
                return true;
            }
            caps.pop();
        }
        false
    }
    let literals: Vec<&str> = pattern.split('*').collect();
    let mut caps = Vec::new();
    go(&literals, text, &mut caps).then_some(caps)
}

fn substitute(template: &str, parts: &Parts, captures: &[&str]) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = start + rest[start..].find('}').expect("checked at load");
        let name = &rest[start + 1..end];
        match name {
            "ref" => out.push_str(parts.reference),
            "registry" => out.push_str(parts.registry),
            "repository" => out.push_str(parts.repository),
            "name" => out.push_str(parts.repository.rsplit('/').next().unwrap_or("")),
            "tag" => out.push_str(parts.tag),
            "flat" => {
                out.push_str(&parts.repository.replace('/', "+"));
                out.push('+');
                out.push_str(parts.tag);
            }
            n => {
                let i: usize = n.parse().expect("checked at load");
                out.push_str(captures.get(i - 1).copied().unwrap_or(""));
            }
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn check_template(t: &str, stars: usize) -> Result<(), String> {
    if !t.starts_with('/') {
        return Err(
            "must be an absolute path on the cluster, e.g. \"/shared/images/{flat}.sqsh\"".into(),
        );
    }
    let mut rest = t;
    while let Some(start) = rest.find(['{', '}']) {
        if rest[start..].starts_with('}') {
            return Err("has a `}` without its `{`".into());
        }
        let Some(len) = rest[start..].find('}') else {
            return Err("has a `{` without its `}`".into());
        };
        let name = &rest[start + 1..start + len];
        let known = PLACEHOLDERS.iter().any(|(p, _)| *p == name && *p != "1");
        let capture = name.len() == 1 && name.parse::<usize>().is_ok_and(|n| (1..=9).contains(&n));
        if capture {
            let n: usize = name.parse().unwrap_or(0);
            if n > stars {
                return Err(format!(
                    "`{{{n}}}` names the pattern's {n}. `*`, but it has {stars}"
                ));
            }
        } else if !known {
            return Err(format!(
                "`{{{name}}}` is not a placeholder; use {{ref}}, {{registry}}, {{repository}}, {{name}}, \
                 {{tag}}, {{flat}} or {{1}}...{{9}}"
            ));
        }
        rest = &rest[start + len + 1..];
    }
    Ok(())
}

fn check_path(p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        return Err("is not an absolute path".into());
    }
    if p.chars().any(char::is_control) {
        return Err("holds a control character".into());
    }
    if p.split('/').any(|c| c == "..") {
        return Err("has a `..` component".into());
    }
    if p.ends_with('/') {
        return Err("names a directory (ends with `/`)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: &str, pyxis: Option<&str>, apptainer: Option<&str>) -> FileImageRule {
        FileImageRule {
            pattern: pattern.into(),
            pyxis: pyxis.map(Into::into),
            apptainer: apptainer.map(Into::into),
        }
    }

    fn map(rules: Vec<FileImageRule>) -> ImageMap {
        ImageMap::from_file("images", rules).unwrap()
    }

    fn path(m: &ImageMap, reference: &str, rt: Runtime) -> Option<String> {
        m.resolve(reference, rt).unwrap().map(|s| s.path)
    }

    #[test]
    fn the_issue_example_maps_per_runtime() {
        let m = map(vec![rule(
            "ghcr.io/org/*",
            Some("/shared/images/{flat}.sqsh"),
            Some("/shared/images/{flat}.sif"),
        )]);
        assert_eq!(
            path(&m, "ghcr.io/org/train:1.0", Runtime::Pyxis).as_deref(),
            Some("/shared/images/org+train+1.0.sqsh")
        );
        assert_eq!(
            path(&m, "ghcr.io/org/train:1.0", Runtime::Apptainer).as_deref(),
            Some("/shared/images/org+train+1.0.sif")
        );
        // Pyxis' own `registry#image` form names the same image.
        assert_eq!(
            path(&m, "ghcr.io#org/train:1.0", Runtime::Pyxis).as_deref(),
            Some("/shared/images/org+train+1.0.sqsh")
        );
        let s = m
            .resolve("ghcr.io/org/train:1.0", Runtime::Pyxis)
            .unwrap()
            .unwrap();
        assert_eq!(s.reference, "ghcr.io/org/train:1.0");
        assert_eq!(s.pattern, "ghcr.io/org/*");
    }

    #[test]
    fn unmatched_images_and_runtimes_without_a_path_stay_unmapped() {
        let m = map(vec![rule("ghcr.io/org/*", Some("/i/{flat}.sqsh"), None)]);
        assert_eq!(
            path(&m, "docker.io/library/ubuntu:24.04", Runtime::Pyxis),
            None
        );
        assert_eq!(path(&m, "ghcr.io/orgx/train:1", Runtime::Pyxis), None);
        assert_eq!(path(&m, "ghcr.io/org/train:1", Runtime::Apptainer), None);
        assert_eq!(
            path(&ImageMap::default(), "ghcr.io/org/a:1", Runtime::Pyxis),
            None
        );
        // A path is a pre-staged file already, whatever the rules say.
        let all = map(vec![rule("*", Some("/i/{flat}.sqsh"), None)]);
        assert_eq!(path(&all, "/shared/images/cpu.sqsh", Runtime::Pyxis), None);
        assert_eq!(path(&all, "./cpu.sqsh", Runtime::Pyxis), None);
        assert!(path(&all, "ubuntu:24.04", Runtime::Pyxis).is_some());
    }

    #[test]
    fn the_first_rule_with_a_path_for_the_runtime_wins() {
        let m = map(vec![
            rule("ghcr.io/org/train:*", Some("/fast/train-{1}.sqsh"), None),
            rule(
                "ghcr.io/*",
                Some("/slow/{flat}.sqsh"),
                Some("/slow/{flat}.sif"),
            ),
        ]);
        assert_eq!(
            path(&m, "ghcr.io/org/train:2", Runtime::Pyxis).as_deref(),
            Some("/fast/train-2.sqsh")
        );
        // The first rule has no apptainer path: the next one applies.
        assert_eq!(
            path(&m, "ghcr.io/org/train:2", Runtime::Apptainer).as_deref(),
            Some("/slow/org+train+2.sif")
        );
        assert_eq!(
            path(&m, "ghcr.io/org/eval:3", Runtime::Pyxis).as_deref(),
            Some("/slow/org+eval+3.sqsh")
        );
    }

    #[test]
    fn placeholders_and_captures() {
        let m = map(vec![rule(
            "*/*/*:*",
            Some("/i/{registry}/{repository}/{name}/{tag}/{1}-{2}-{3}-{4}/{ref}"),
            None,
        )]);
        assert_eq!(
            path(&m, "registry:5000/team/proj/app:v2", Runtime::Pyxis).as_deref(),
            // Captures are lazy from the left: `*` #1 is the host, #2 `team`, #3 `proj/app`.
            Some(
                "/i/registry:5000/team/proj/app/app/v2/registry:5000-team-proj/app-v2/registry:5000/team/proj/app:v2"
            )
        );
        let untagged = map(vec![rule("*", Some("/i/{flat}|{registry}"), None)]);
        assert_eq!(
            path(&untagged, "ubuntu", Runtime::Pyxis).as_deref(),
            Some("/i/ubuntu+latest|")
        );
        assert_eq!(
            path(&untagged, "localhost/a/b", Runtime::Pyxis).as_deref(),
            Some("/i/a+b+latest|localhost")
        );
        assert_eq!(
            path(&untagged, "ghcr.io/org/x@sha256:abcd", Runtime::Pyxis).as_deref(),
            Some("/i/org+x+abcd|ghcr.io")
        );
        // An exact pattern (no `*`) matches only itself.
        let exact = map(vec![rule("ghcr.io/org/a:1", Some("/i/a.sqsh"), None)]);
        assert_eq!(
            path(&exact, "ghcr.io/org/a:1", Runtime::Pyxis).as_deref(),
            Some("/i/a.sqsh")
        );
        assert_eq!(path(&exact, "ghcr.io/org/a:10", Runtime::Pyxis), None);
    }

    #[test]
    fn a_capture_cannot_leave_the_images_folder() {
        let m = map(vec![rule("evil/*", Some("/shared/images/{1}.sqsh"), None)]);
        let e = m.resolve("evil/../../etc/x", Runtime::Pyxis).unwrap_err();
        assert!(e.contains("`..`"), "{e}");
        assert!(e.contains("evil/*"), "{e}");
    }

    #[test]
    fn bad_rules_are_refused_naming_the_field() {
        let cases = [
            (rule("", Some("/i/x"), None), "images[0].match"),
            (rule("a b", Some("/i/x"), None), "images[0].match"),
            (rule("a/*", None, None), "set `pyxis` and/or `apptainer`"),
            (rule("a/*", Some("i/{flat}.sqsh"), None), "images[0].pyxis"),
            (
                rule("a/*", None, Some("/i/{flot}.sif")),
                "`{flot}` is not a placeholder",
            ),
            (rule("a/*", Some("/i/{2}.sqsh"), None), "but it has 1"),
            (rule("a/*", Some("/i/{flat.sqsh"), None), "without its `}`"),
            (rule("a/*", Some("/i/flat}.sqsh"), None), "without its `{`"),
            (rule("*********/*", Some("/i/x"), None), "at most 9"),
        ];
        for (r, want) in cases {
            let e = ImageMap::from_file("images", vec![r.clone()]).unwrap_err();
            assert!(e.contains(want), "{r:?}: {e}");
        }
    }
}
