//! The docs name only what exists: every `FLYTE_SLURM_*` variable, Helm chart value and
//! `slurm-connector` flag that README.md, docs/ or a README under deploy/ names is one the code,
//! the chart's values.yaml or the CLI has. (The other way round — everything the code reads is
//! documented, and the chart sets only variables the code reads — is checked by
//! `config::tests::docs` and `deploy/validate_chart.py`.) An operator who copies a name from the
//! docs gets a setting that does something, not one silently ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The docs an operator reads: README.md, docs/*.md and every README.md under deploy/.
fn docs() -> Vec<(PathBuf, String)> {
    let mut files = vec![repo().join("README.md")];
    files.extend(md_files(&repo().join("docs")));
    files.extend(md_files(&repo().join("deploy")));
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, text)
        })
        .collect()
}

fn md_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(md_files(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out
}

fn rel(path: &Path) -> String {
    path.strip_prefix(repo()).unwrap().display().to_string()
}

/// Every `"FLYTE_SLURM_…"` string literal in src/: the variables the code reads.
fn code_variables() -> BTreeSet<String> {
    fn walk(dir: &Path, re: &Regex, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, re, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.extend(re.captures_iter(&text).map(|c| c[1].to_string()));
            }
        }
    }
    let re = Regex::new(r#""(FLYTE_SLURM_[A-Z0-9_]+)""#).unwrap();
    let mut out = BTreeSet::new();
    walk(&repo().join("src"), &re, &mut out);
    assert!(out.len() > 20, "found only {out:?} in src/");
    out
}

/// The SSH plugin's variables: the migration guide names them to say they are no longer read.
const SSH_PLUGIN_VARIABLES: &[&str] = &[
    "FLYTE_SLURM_HOST",
    "FLYTE_SLURM_PORT",
    "FLYTE_SLURM_SSH_PRIVATE_KEY",
    "FLYTE_SLURM_KNOWN_HOSTS",
    "FLYTE_SLURM_SKIP_HOST_KEY_VERIFICATION",
];

#[test]
fn docs_name_only_variables_the_code_reads() {
    let code = code_variables();
    // `FLYTE_SLURM_CLUSTERED_*` names a family: a prefix of some variable.
    let re = Regex::new(r"FLYTE_SLURM_[A-Z0-9][A-Z0-9_]*").unwrap();
    let mut unknown = Vec::new();
    for (file, text) in docs() {
        for (n, line) in text.lines().enumerate() {
            for m in re.find_iter(line) {
                let name = m.as_str();
                let known = code.contains(name)
                    || SSH_PLUGIN_VARIABLES.contains(&name)
                    || (name.ends_with('_') && code.iter().any(|c| c.starts_with(name)));
                if !known {
                    unknown.push(format!("{}:{}: {name}", rel(&file), n + 1));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "docs name variables the code does not read:\n{}",
        unknown.join("\n")
    );
}

/// The chart's values.yaml, parsed.
fn chart_values() -> serde_yaml::Value {
    let text =
        std::fs::read_to_string(repo().join("deploy/helm/slurm-connector/values.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// Does `path` (`a.b.c`, `a.list[0].x`) name a value? Below a list, an empty map or a scalar
/// the chart passes through whatever Kubernetes takes, so anything there is accepted.
fn value_exists(values: &serde_yaml::Value, path: &str) -> bool {
    let mut node = values;
    for seg in path.split('.') {
        let key = seg.split('[').next().unwrap();
        match node {
            serde_yaml::Value::Mapping(m) if !m.is_empty() => match m.get(key) {
                Some(next) => node = next,
                None => return false,
            },
            _ => return true,
        }
        if seg.contains('[') {
            return true;
        }
    }
    true
}

/// `tls.crt`, `clusters.toml`: a file's name, which may start like a value (`tls`).
fn is_file_name(path: &str) -> bool {
    const EXTENSIONS: &[&str] = &[
        "crt", "key", "pem", "toml", "yaml", "yml", "json", "md", "sh", "service", "timer", "env",
        "conf", "py",
    ];
    path.rsplit('.')
        .next()
        .is_some_and(|ext| EXTENSIONS.contains(&ext))
}

/// The chart values a doc names that values.yaml lacks, and how many it names. A value is written
/// `` `cluster.workingDir` `` (maybe with `=…` or `: …`, a span that may go on over a line
/// break), or after `--set`. Dotted names under none of values.yaml's top-level keys are not
/// values (`cluster.toml` and `jwt_hs256.key` are files, `flyte.map` is Python), unless the key
/// is a misspelling of one (`connecter.logLevel`).
fn value_problems(file: &str, text: &str) -> (Vec<String>, usize) {
    let values = chart_values();
    let tops: BTreeSet<String> = values
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(|k| k.as_str().map(str::to_string))
        .collect();
    assert!(
        tops.contains("cluster") && tops.contains("auth"),
        "{tops:?}"
    );
    let spans =
        Regex::new(r"`([A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_\[\]]+)+)(?:[=:][^`]*)?`").unwrap();
    let sets =
        Regex::new(r"--set(?:-string|-file)?[ =]([A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_\[\]]+)+)=")
            .unwrap();
    let mut unknown = Vec::new();
    let mut seen = 0;
    for c in spans.captures_iter(text).chain(sets.captures_iter(text)) {
        let path = &c[1];
        let line = text[..c.get(0).unwrap().start()].lines().count().max(1);
        let top = path.split(['.', '[']).next().unwrap();
        if is_file_name(path) {
            continue;
        }
        if !tops.contains(top) {
            if let Some(meant) = tops.iter().find(|t| misspelt(top, t)) {
                unknown.push(format!(
                    "{file}:{line}: {path} ({top} is no top-level value; {meant}?)"
                ));
            }
            continue;
        }
        seen += 1;
        if !value_exists(&values, path) {
            unknown.push(format!("{file}:{line}: {path}"));
        }
    }
    (unknown, seen)
}

#[test]
fn docs_name_only_chart_values_that_exist() {
    let mut unknown = Vec::new();
    let mut seen = 0;
    for (file, text) in docs() {
        let (u, n) = value_problems(&rel(&file), &text);
        unknown.extend(u);
        seen += n;
    }
    assert!(
        seen > 10,
        "found only {seen} chart values named in the docs: is the pattern stale?"
    );
    assert!(
        unknown.is_empty(),
        "docs name chart values that deploy/helm/slurm-connector/values.yaml lacks:\n{}",
        unknown.join("\n")
    );
}

/// Issue 55's two misspelt top-level keys, each made in a copy of the quick start: the value
/// check skipped names under a top-level key values.yaml lacks, so neither was seen.
#[test]
fn misspelt_top_level_keys_in_a_copy_of_the_quickstart_are_caught() {
    let quickstart = std::fs::read_to_string(repo().join("docs/quickstart-kubernetes.md")).unwrap();
    assert!(value_problems("q", &quickstart).0.is_empty());
    for (good, bad) in [
        (
            "`networkPolicy.flyte.namespaceSelector`",
            "`networkPolicies.flyte.namespaceSelector`",
        ),
        ("`connector.logLevel:", "`connecter.logLevel:"),
    ] {
        let copy = quickstart.replacen(good, bad, 1);
        assert_ne!(copy, quickstart, "the quick start no longer has {good}");
        let (problems, _) = value_problems("q", &copy);
        assert!(
            problems.iter().any(|p| p.contains("is no top-level value")),
            "{bad}: {problems:?}"
        );
    }
}

/// `a` is `b` misspelt: both 5 letters or more, an edit distance of 1 (3 from 10 letters:
/// `networkPolicies` for `networkPolicy`, `connecter` for `connector`), and camelCase like the
/// chart's keys. Dotted names under no top-level value are skipped (`flyte.map`,
/// `connection.host`, `security_context.run_as`) unless they are this close.
fn misspelt(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let shortest = a.len().min(b.len());
    if a == b || shortest < 5 || a.contains(&'_') {
        return false;
    }
    let limit = if shortest < 10 { 1 } else { 3 };
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j + 1] + 1)
                    .min(cur[j] + 1)
                    .min(prev[j] + usize::from(ca != cb)),
            );
        }
        prev = cur;
    }
    prev[b.len()] <= limit
}

/// `slurm-connector [SUB] --help`'s long flags.
fn flags_of(sub: Option<&str>) -> BTreeSet<String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
    cmd.args(sub).arg("--help");
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{sub:?} --help: {out:?}");
    let re = Regex::new(r"--([a-z][a-z0-9-]+)").unwrap();
    re.captures_iter(&String::from_utf8_lossy(&out.stdout))
        .map(|c| c[1].to_string())
        .chain(["help".to_string()])
        .collect()
}

const SUBCOMMANDS: &[&str] = &["serve", "render", "check", "submit", "stager"];

#[test]
fn docs_name_only_flags_the_cli_has() {
    let mut flags: BTreeMap<&str, BTreeSet<String>> = SUBCOMMANDS
        .iter()
        .map(|s| (*s, flags_of(Some(s))))
        .collect();
    flags.insert("", flags_of(None));
    assert!(flags["serve"].contains("listen"), "{flags:?}");
    // A command line of ours: `slurm-connector SUB …` (or `cargo run --release -- SUB …`) up to
    // a pipe, `;`, `&&` or the end of the code span; or a code span that starts with a
    // subcommand, as the README's table writes them. Continued lines are joined first.
    let invocation = Regex::new(
        r"(?:slurm-connector|cargo run(?: --release)? --)\s+(serve|render|check|submit|stager)\b([^|;&`]*)",
    )
    .unwrap();
    let span = Regex::new(r"`(serve|render|check|submit|stager) ([^`]*)`").unwrap();
    let top = Regex::new(r"slurm-connector\s+(--[a-z][a-z0-9-]*)").unwrap();
    let flag = Regex::new(r"(?:^|[\s\[(])--([a-z][a-z0-9-]+)").unwrap();
    let mut unknown = Vec::new();
    let mut seen = 0;
    for (file, text) in docs() {
        let joined = text.replace("\\\n", " ");
        for (n, line) in joined.lines().enumerate() {
            let mut check = |sub: &str, args: &str| {
                for f in flag.captures_iter(args) {
                    seen += 1;
                    if !flags[sub].contains(&f[1]) {
                        let shown = if sub.is_empty() {
                            "slurm-connector"
                        } else {
                            sub
                        };
                        unknown.push(format!("{}:{}: {shown} --{}", rel(&file), n + 1, &f[1]));
                    }
                }
            };
            for c in invocation
                .captures_iter(line)
                .chain(span.captures_iter(line))
            {
                check(c.get(1).unwrap().as_str(), c.get(2).unwrap().as_str());
            }
            for c in top.captures_iter(line) {
                check("", c.get(1).unwrap().as_str());
            }
        }
    }
    assert!(
        seen > 10,
        "found only {seen} flags in the docs: is the pattern stale?"
    );
    assert!(
        unknown.is_empty(),
        "docs name flags `slurm-connector` does not have (line numbers count joined `\\` lines):\n{}",
        unknown.join("\n")
    );
}

/// The checks above catch what they claim: a made-up name of each kind is flagged.
#[test]
fn the_checks_flag_made_up_names() {
    let values = chart_values();
    assert!(value_exists(&values, "cluster.workingDir"));
    assert!(value_exists(
        &values,
        "sharedFilesystem.mounts[0].volume.nfs"
    ));
    assert!(!value_exists(&values, "cluster.workDir"));
    assert!(!value_exists(&values, "auth.token"));
    // Misspelt top-level keys, which the value check skipped before (issue 55).
    assert!(misspelt("networkPolicies", "networkPolicy") && misspelt("connecter", "connector"));
    assert!(!misspelt("flyte", "tls") && !misspelt("slurm", "slurmrestdCA"));
    assert!(
        !misspelt("connection", "connector") && !misspelt("security_context", "securityContext")
    );
    assert!(is_file_name("tls.crt") && !is_file_name("tls.existingSecret"));
    assert!(!code_variables().contains("FLYTE_SLURM_WORKDIR"));
    assert!(!flags_of(Some("serve")).contains("port"));
}

/// docs/quickstart-kubernetes.md shows the quick-start's values as the file CI renders, validates
/// (deploy/validate_chart.py) and runs as a pod against a real Slurm (`ci-image.sh --quickstart`):
/// the block between its markers is that file, byte for byte, so what CI tests is what the doc
/// tells a newcomer to install.
#[test]
fn the_quickstart_doc_shows_the_values_ci_runs() {
    const FILE: &str = "deploy/helm/slurm-connector/ci/quickstart-values.yaml";
    let doc = std::fs::read_to_string(repo().join("docs/quickstart-kubernetes.md")).unwrap();
    let begin = format!("<!-- quickstart-values: {FILE} -->");
    let start = doc
        .find(&begin)
        .unwrap_or_else(|| panic!("docs/quickstart-kubernetes.md lacks the marker {begin}"));
    let rest = &doc[start + begin.len()..];
    let end = rest
        .find("<!-- /quickstart-values -->")
        .expect("docs/quickstart-kubernetes.md lacks <!-- /quickstart-values -->");
    let block = rest[..end].trim();
    let body = block
        .strip_prefix("```yaml\n")
        .and_then(|b| b.strip_suffix("```"))
        .unwrap_or_else(|| panic!("the quick-start values are not one ```yaml block:\n{block}"));
    let file = std::fs::read_to_string(repo().join(FILE)).unwrap();
    assert!(
        body == file,
        "docs/quickstart-kubernetes.md's values differ from {FILE}: show the file verbatim"
    );
}

/// `slurm-connector --help`'s subcommands.
fn subcommands_of_help() -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_slurm-connector"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let section = text
        .split("Commands:")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or_else(|| panic!("no Commands: in --help:\n{text}"));
    section
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

/// The image's entrypoint (deploy/docker/Dockerfile's `ENTRYPOINT`): the arguments a pod gives
/// follow it.
fn image_entrypoint() -> String {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/docker/Dockerfile")).unwrap();
    let line = dockerfile
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .expect("the Dockerfile has an ENTRYPOINT");
    let exe: Vec<String> = serde_json::from_str(line.trim_start_matches("ENTRYPOINT").trim())
        .expect("ENTRYPOINT in exec form");
    exe[0].rsplit('/').next().unwrap().to_string()
}

/// Where a doc runs `slurm-connector` and with what first argument, in its code blocks and
/// code spans: the binary as a command (line start, after `--`, a pipe, `sudo`, `$(`), and the
/// arguments a `kubectl run` of the connector's image passes to its entrypoint.
fn invocation_problems(file: &str, text: &str, subs: &BTreeSet<String>) -> Vec<String> {
    let entrypoint = image_entrypoint();
    let mut code = String::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            code.push('\n');
            continue;
        }
        if in_block {
            code.push_str(line);
        } else {
            // Prose: its code spans only, each on a line of its own.
            for span in line.split('`').skip(1).step_by(2) {
                code.push_str(span);
                code.push('\n');
            }
        }
        code.push('\n');
    }
    let code = code.replace("\\\n", " ");
    let command = Regex::new(
        r"(?m)(?:^[ \t]*(?:\$[ \t]+)?|[|;&][ \t]*|[ \t]--[ \t]+|\bsudo[ \t]+|\$\([ \t]*)slurm-connector[ \t]+([^\s|;&`)]+)",
    )
    .unwrap();
    let run = Regex::new(
        r"kubectl\b[^\n]*[ \t]run[ \t][^\n]*--image=\S*slurm-connector\S*[^\n]*?[ \t]--[ \t]+(\S+)",
    )
    .unwrap();
    let mut problems = Vec::new();
    for c in command.captures_iter(&code) {
        let word = &c[1];
        if !word.starts_with("--") && !subs.contains(word) {
            problems.push(format!(
                "{file}: `slurm-connector {word}`: no such subcommand (--help lists {subs:?})"
            ));
        }
    }
    for c in run.captures_iter(&code) {
        let first = &c[1];
        let whole = c.get(0).unwrap().as_str();
        if whole.contains("--command") {
            continue;
        }
        if first == entrypoint {
            problems.push(format!(
                "{file}: `kubectl run … --image=…slurm-connector… -- {first} …`: the image's \
                 ENTRYPOINT is already {entrypoint}, so this runs `{entrypoint} {first} …` \
                 (unrecognized subcommand); and a pod made by kubectl run has no securityContext \
                 or imagePullSecrets: use `helm test` or `kubectl exec`"
            ));
        } else if !subs.contains(first) {
            problems.push(format!(
                "{file}: `kubectl run … -- {first}`: {first} is not a subcommand of the image's \
                 entrypoint {entrypoint}"
            ));
        }
    }
    problems
}

#[test]
fn docs_run_only_subcommands_the_cli_has() {
    let subs = subcommands_of_help();
    assert!(subs.contains("check") && subs.contains("serve"), "{subs:?}");
    let mut problems = Vec::new();
    for (file, text) in docs() {
        problems.extend(invocation_problems(&rel(&file), &text, &subs));
    }
    assert!(
        problems.is_empty(),
        "docs run `slurm-connector` as it cannot be run:\n{}",
        problems.join("\n")
    );
}

/// The two ways issue 55 found the operator pages running the binary wrong, each made in a copy
/// of the page: a subcommand written without flags (which the flag check cannot see) and the
/// `kubectl run` that passed the binary's name to an image whose entrypoint is the binary.
#[test]
fn a_misspelt_subcommand_and_the_broken_kubectl_run_are_caught() {
    let subs = subcommands_of_help();
    let quickstart = std::fs::read_to_string(repo().join("docs/quickstart-kubernetes.md")).unwrap();
    let deploy = std::fs::read_to_string(repo().join("docs/deploy.md")).unwrap();
    assert!(invocation_problems("q", &quickstart, &subs).is_empty());
    assert!(invocation_problems("d", &deploy, &subs).is_empty());

    let chek = quickstart.replacen("-- slurm-connector check\n", "-- slurm-connector chek\n", 1);
    assert_ne!(chek, quickstart, "the quick start lost its `check` line");
    assert!(
        invocation_problems("q", &chek, &subs)
            .iter()
            .any(|p| p.contains("`slurm-connector chek`")),
        "a subcommand without flags"
    );
    let span = format!("{quickstart}\nRun `slurm-connector preflight` first.\n");
    assert!(
        !invocation_problems("q", &span, &subs).is_empty(),
        "in a code span"
    );

    let broken = "```sh\nkubectl -n flyte run connector-probe --rm -i --restart=Never \\\n  \
                  --image=registry.example/hpc/slurm-connector:0.1.0 \\\n  \
                  --labels=app.kubernetes.io/name=flytepropeller -- \\\n  \
                  slurm-connector check --connector slurm-connector-headless.flyte.svc.cluster.local:8000\n```\n";
    let with_run = format!("{deploy}\n{broken}");
    let problems = invocation_problems("d", &with_run, &subs);
    assert!(
        problems.iter().any(|p| p.contains("ENTRYPOINT is already")),
        "{problems:?}"
    );
    // Written as the image expects (`-- check …`), kubectl run passes this check; the Python
    // side (deploy/validate_chart.py) still refuses it for Pod Security Admission.
    let fixed = with_run.replace("-- \\\n  slurm-connector check", "-- \\\n  check");
    assert!(invocation_problems("d", &fixed, &subs).is_empty());
}
