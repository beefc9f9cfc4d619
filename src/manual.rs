//! The man pages and shell completions the package installs, made from the command-line
//! definition itself (clap_mangen, clap_complete) so they never disagree with `--help`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Arg, ArgAction, Command};
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, italic, roman};

use crate::settings;

/// `shrinkfs package-files`.
#[derive(Debug, clap::Args)]
pub struct PackageFilesArgs {
    /// Directory to write into (created): man/ holds shrinkfs.1, a page per subcommand and
    /// mount.shrinkfs.8; completions/ holds shrinkfs.bash, _shrinkfs (zsh) and shrinkfs.fish.
    pub dir: PathBuf,
}

/// Writes the man pages and completions under `dir`.
pub fn write_package_files(dir: &Path) -> anyhow::Result<()> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    write_man_pages(&man).with_context(|| format!("cannot write man pages into {}", man.display()))?;
    for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
        clap_complete::generate_to(shell, &mut settings::command(), "shrinkfs", &completions)
            .with_context(|| format!("cannot write {shell} completions into {}", completions.display()))?;
    }
    Ok(())
}

/// shrinkfs.1, shrinkfs-SUBCOMMAND.1 for each visible subcommand, and mount.shrinkfs.8.
fn write_man_pages(dir: &Path) -> std::io::Result<()> {
    let mut cmd = with_env_names(settings::command()).disable_help_subcommand(true);
    cmd.build();
    fn subcommands(cmd: &Command, dir: &Path) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            subcommands(sub, dir)?;
            Man::new(sub.clone()).generate_to(dir)?;
        }
        Ok(())
    }
    subcommands(&cmd, dir)?;
    let mut page = Vec::new();
    Man::new(cmd.clone()).render(&mut page)?;
    page.extend(root_sections(&cmd).render().into_bytes());
    std::fs::write(dir.join("shrinkfs.1"), page)?;
    Man::new(helper_command()).section("8").generate_to(dir)?;
    Ok(())
}

/// The command with each settable flag naming its `SHRINKFS_*` variable (shown in the man pages
/// only: parsing reads the variables through [`settings`]).
fn with_env_names(cmd: Command) -> Command {
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    let mut cmd = cmd.mut_args(|a| {
        if a.get_id() == "config" {
            return a.env(settings::CONFIG_VAR);
        }
        match a.get_long().filter(|_| settings::settable(&a)) {
            Some(long) => {
                let var = settings::env_name(long);
                a.env(var)
            }
            None => a,
        }
    });
    for name in names {
        cmd = cmd.mut_subcommand(name, with_env_names);
    }
    cmd
}

/// FILES, ENVIRONMENT, EXIT STATUS and SEE ALSO of shrinkfs(1).
fn root_sections(cmd: &Command) -> Roff {
    let mut r = Roff::new();
    let item = |r: &mut Roff, term: &str, text: &str| {
        r.control("TP", []).text([bold(term)]).text([roman(text)]);
    };
    r.control("SH", ["FILES"]);
    item(
        &mut r,
        settings::DEFAULT_CONFIG,
        "Settings: top-level keys for global flags (verbose), a table per subcommand ([mount], [pack], \
         [bench.fs], ...) whose keys are its long flag names, written with - or _. Values are strings, \
         numbers, booleans, or arrays for repeatable flags. An unknown key or a bad value is an error naming \
         the file and the key (exit status 2). The packaged file lists the common keys, commented out.",
    );
    item(
        &mut r,
        "/lib/systemd/system/shrinkfs-mount@.service",
        "One mount as a service: the instance is the escaped mount point (systemd-escape --path), the \
         bucket and extra flags come from /etc/shrinkfs/INSTANCE.env (SHRINKFS_SOURCE, SHRINKFS_ARGS, \
         and any SHRINKFS_FLAG variable).",
    );
    item(&mut r, "/sbin/mount.shrinkfs", "The mount(8) helper, a link to shrinkfs; see mount.shrinkfs(8).");
    item(&mut r, "/usr/share/doc/shrinkfs/examples/", "fstab lines and a systemd .mount unit.");
    r.control("SH", ["ENVIRONMENT"]);
    item(
        &mut r,
        "SHRINKFS_FLAG",
        "Every long flag of the subcommand being run, upper case with - as _: SHRINKFS_MEMORY_LIMIT=2G \
         is --memory-limit 2G, SHRINKFS_ALLOW_OTHER=true is --allow-other (switches take true/false, \
         yes/no, on/off, 1/0), SHRINKFS_VERBOSE=2 is -vv. An empty variable is unset, except \
         SHRINKFS_KEY_FILE, SHRINKFS_SSE, SHRINKFS_SSE_KMS_KEY_ID and SHRINKFS_SSE_C_KEY_FILE, which \
         stop the command when empty. The command line wins \
         over the environment, which wins over the config file. A variable applies to every subcommand \
         that has the flag.",
    );
    item(&mut r, settings::CONFIG_VAR, "The config file to read instead of the default; empty: none.");
    item(&mut r, "RUST_LOG", "Log filter (tracing EnvFilter syntax), overriding -v.");
    item(
        &mut r,
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_PROFILE",
        "S3 credentials and region; otherwise ~/.aws/credentials and ~/.aws/config.",
    );
    item(
        &mut r,
        "SHRINKFS_NVCOMP_LIB",
        "Path of libnvcomp.so.6 for GPU compression (otherwise Python packages and the library path are searched).",
    );
    r.control("SH", ["EXIT STATUS"]);
    for (code, text) in [
        (crate::exit::OK, "success"),
        (crate::exit::OTHER, "any other failure"),
        (crate::exit::USAGE, "bad command line, option, setting or mount point"),
        (crate::exit::IO, "reading or writing a file or object failed, or the store is unavailable"),
        (crate::exit::CORRUPT, "corrupt or undecryptable input, or a key that does not match the bucket"),
    ] {
        item(&mut r, &code.to_string(), text);
    }
    r.control("SH", ["SEE ALSO"]);
    let mut see: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| format!("{}(1)", s.get_display_name().unwrap_or(s.get_name())))
        .collect();
    see.extend(["mount.shrinkfs(8)", "fstab(5)", "systemd.mount(5)", "mount(8)"].map(String::from));
    r.text([roman(see.join(", "))]);
    r.control("PP", []);
    r.text([
        roman("The documents under "),
        italic("/usr/share/doc/shrinkfs/"),
        roman(": OPERATING.md (fstab, systemd, signals, logs), SEMANTICS.md, FORMAT.md."),
    ]);
    r
}

/// The mount(8) helper's interface, as src/fstab.rs implements it, for mount.shrinkfs(8).
fn helper_command() -> Command {
    Command::new(crate::fstab::HELPER)
        .about("mount a shrinkfs bucket from fstab or mount -t shrinkfs")
        .long_about(
            "mount(8) runs this helper for entries of type shrinkfs (in /etc/fstab, systemd .mount units, \
             or mount -t shrinkfs SOURCE DIR). It runs `shrinkfs mount SOURCE MOUNTPOINT --daemon` with the \
             options turned into flags, and returns once the mount answers.",
        )
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(
            Arg::new("source")
                .value_name("SOURCE")
                .required(true)
                .help("The bucket: a local directory or s3://bucket[/prefix] (see shrinkfs-mount(1))."),
        )
        .arg(Arg::new("mountpoint").value_name("MOUNTPOINT").required(true).help("An existing directory."))
        .arg(Arg::new("options").short('o').value_name("OPTIONS").help(
            "Comma-separated options. name=value is the shrinkfs mount flag --name value (name in - or _ \
             spelling; a switch is written alone, or =true/=false). Generic options (ro, rw, noexec, nosuid, \
             nodev, noatime, relatime, sync, ...) go to the kernel. fstab words (defaults, _netdev, nofail, \
             noauto, user, x-systemd.*) are left to mount(8) and systemd. env.NAME=value sets the variable \
             NAME for the mount (boot-time mounts have no HOME; env.SHRINKFS_CONFIG=FILE picks a config file). \
             remount changes the kernel options of the live mount. An unknown option is an error.",
        ))
        .arg(Arg::new("sloppy").short('s').action(ArgAction::SetTrue).help("Ignore unknown options."))
        .arg(Arg::new("fake").short('f').action(ArgAction::SetTrue).help("Check the options, mount nothing."))
        .arg(Arg::new("no-mtab").short('n').action(ArgAction::SetTrue).help("Accepted, ignored."))
        .arg(Arg::new("verbose").short('v').action(ArgAction::SetTrue).help("Accepted, ignored."))
        .after_long_help(
            "Example fstab line: /srv/bucket /mnt/data shrinkfs codec=zstd,level=3,noatime,_netdev,nofail 0 0. \
             Settings not given as options come from SHRINKFS_* variables and /etc/shrinkfs/config.toml as \
             for shrinkfs(1). The mount's log goes to the journal, or to log-file=FILE.",
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_pages_and_completions_cover_every_subcommand_and_name_the_variables() {
        let dir = tempfile::tempdir().unwrap();
        write_package_files(dir.path()).unwrap();
        let man = |name: &str| std::fs::read_to_string(dir.path().join("man").join(name)).unwrap();
        let root = man("shrinkfs.1");
        for want in ["FILES", "ENVIRONMENT", "EXIT STATUS", "/etc/shrinkfs/config.toml", "shrinkfs\\-mount(1)"] {
            assert!(root.contains(want), "shrinkfs.1 lacks {want}");
        }
        let mount = man("shrinkfs-mount.1");
        assert!(mount.contains("memory\\-limit") && mount.contains("SHRINKFS_MEMORY_LIMIT"), "{mount}");
        assert!(mount.contains("[mount] section"), "the settings note");
        for page in ["shrinkfs-pack.1", "shrinkfs-bench-fs.1", "mount.shrinkfs.8"] {
            assert!(!man(page).is_empty());
        }
        assert!(!dir.path().join("man/shrinkfs-package-files.1").exists(), "hidden subcommands have no page");
        for (file, want) in
            [("shrinkfs.bash", "--memory-limit"), ("_shrinkfs", "--memory-limit"), ("shrinkfs.fish", "memory-limit")]
        {
            let text = std::fs::read_to_string(dir.path().join("completions").join(file)).unwrap();
            assert!(text.contains(want), "{file}");
        }
    }
}
