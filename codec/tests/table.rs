//! The codec table against the documents that list codecs: docs/FORMAT.md's "Codec ids" table
//! names every codec of the table with its id and whether a CPU-only host decodes it, and nothing
//! else. (The command line's values and the man page are made from the table itself.)

use shrinkfs_codec::CodecId;

fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn format_md_lists_exactly_the_codecs_of_the_table() {
    let spec = repo_file("docs/FORMAT.md");
    let section = &spec[spec.find("### Codec ids").expect("a codec ids section")..];
    // Rows: | id | name | payload | decodable on a CPU-only host |
    let listed: Vec<(u8, String, bool)> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let id = cells.first()?.parse().ok()?;
            Some((id, cells[1].to_owned(), cells.last()?.starts_with("yes")))
        })
        .collect();
    let mut table: Vec<(u8, String, bool)> =
        CodecId::ALL.iter().map(|&c| (c as u8, c.name().to_owned(), !c.gpu_only())).collect();
    table.sort();
    assert_eq!(listed, table, "docs/FORMAT.md's codec ids and the codec table (codec.rs) differ");
}
