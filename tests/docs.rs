//! The committed man pages and completions must match what the clap definitions generate now.
//! `scripts/gen-docs` rewrites them.

use crate::util::repo;

#[test]
fn man_pages_and_completions_do_not_drift() {
    let mut drifted = Vec::new();
    for (rel, contents) in accel::docs::render_all() {
        let path = repo().join(&rel);
        if std::env::var_os("ACCEL_UPDATE_DOCS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &contents).unwrap();
            continue;
        }
        match std::fs::read(&path) {
            Ok(on_disk) if on_disk == contents => {}
            _ => drifted.push(rel),
        }
    }
    assert!(
        drifted.is_empty(),
        "generated docs differ from the committed ones (run scripts/gen-docs): {drifted:?}"
    );
}

#[test]
fn every_man_page_has_the_hand_sections() {
    for tool in accel::cli::tools() {
        let page = String::from_utf8(accel::docs::man_page(&tool)).unwrap();
        for section in ["EXIT STATUS", "ENVIRONMENT", "SEE ALSO"] {
            assert!(
                page.contains(&format!(".SH \"{section}\""))
                    || page.contains(&format!(".SH {section}")),
                "{} lacks {section}",
                tool.name
            );
        }
    }
}
