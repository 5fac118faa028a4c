//! `docs/sbatch-options.md` is generated from the option table; this fails when it is stale.
//! Regenerate with `UPDATE_GOLDEN=1 cargo test --test it render_docs::`.

use slurm_connector::render::options::markdown_table;

#[test]
fn sbatch_options_doc_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sbatch-options.md");
    let want = markdown_table();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale: run UPDATE_GOLDEN=1 cargo test --test it render_docs::",
        path.display()
    );
}
