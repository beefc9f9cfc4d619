//! The mount(8) helper: run as `mount.shrinkfs SOURCE DIR [-sfnv] [-o OPTIONS]` (by `mount -t
//! shrinkfs` and fstab entries), the binary turns the options into a `shrinkfs mount --daemon`
//! command line: each `name=value` is the flag `--name value` (`-` or `_`), generic options go
//! to the kernel, fstab-only words are dropped, `env.NAME=value` sets the environment a
//! boot-time mount lacks, and `remount` changes the kernel's flags of a live mount.

use std::ffi::OsString;

use clap::CommandFactory;

use crate::exit::UsageError;

/// The name mount(8) runs the helper by.
pub const HELPER: &str = "mount.shrinkfs";
/// The name mount(8) runs it by for type `fuse.shrinkfs`.
pub const HELPER_FUSE: &str = "mount.fuse.shrinkfs";

/// Generic options of mount(8), passed to the kernel through `shrinkfs mount -o`.
const KERNEL: &[&str] = &[
    "ro",
    "rw",
    "exec",
    "noexec",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "atime",
    "noatime",
    "relatime",
    "strictatime",
    "diratime",
    "nodiratime",
    "sync",
    "async",
    "dirsync",
];

/// Words meaningful to mount(8), systemd or fstab only, or set by shrinkfs itself.
fn fstab_only(o: &str) -> bool {
    matches!(
        o,
        "defaults" | "auto" | "noauto" | "user" | "users" | "nouser" | "owner" | "group" | "_netdev" | "nofail"
            | "norelatime" | "lazytime" | "nolazytime" | "loud" | "silent" | "bg" | "fg" | "helper=shrinkfs"
    ) || o.starts_with("x-")
        // FUSE's own superblock options, which mount(8) passes back on a remount; shrinkfs sets them.
        || o == "default_permissions"
        || ["user_id=", "group_id=", "rootmode=", "max_read=", "blksize=", "fd=", "fsname=", "subtype="]
            .iter()
            .any(|p| o.starts_with(p))
        || o.starts_with("comment=")
        || o.starts_with("user=")
}

/// What the helper was asked to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Helper {
    /// Run this `shrinkfs` command line.
    Mount(Vec<OsString>),
    /// Change the kernel flags of the live mount at this directory.
    Remount {
        /// The mount point.
        dir: std::path::PathBuf,
        /// Its generic options.
        options: Vec<String>,
    },
    /// `-f`: pretend (mount(8) checks the options, mounts nothing).
    Fake,
}

/// Whether the program was started as the mount helper.
pub fn is_helper(argv0: &std::ffi::OsStr) -> bool {
    // mount(8) runs `mount.fuse.shrinkfs` for what /proc/mounts lists as fuse.shrinkfs (a
    // remount), `mount.shrinkfs` for fstab entries of type shrinkfs.
    std::path::Path::new(argv0).file_name().is_some_and(|n| n == HELPER || n == HELPER_FUSE)
}

/// Splits an fstab option string at commas, keeping `\,` inside a value, and commas inside
/// double quotes (libmount's `name="a,b"`; the quotes are not part of the value).
fn split_options(s: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = s.chars();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(n) => out.last_mut().expect("never empty").push(n),
                None => out.last_mut().expect("never empty").push('\\'),
            },
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            c => out.last_mut().expect("never empty").push(c),
        }
    }
    if quoted {
        // An unbalanced quote: the options as given, split at every comma, so the mistake shows
        // as an option that is not one rather than swallowing the rest.
        return s.split(',').filter(|o| !o.is_empty()).map(str::to_owned).collect();
    }
    out.into_iter().filter(|o| !o.is_empty()).collect()
}

/// Turns the helper's arguments (after argv[0]) into what to do. Environment settings
/// (`env.NAME=value`) are returned separately for the caller to apply.
pub fn translate(args: &[String]) -> Result<(Helper, Vec<(String, String)>), UsageError> {
    let usage = || UsageError(format!("usage: {HELPER} SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS]"));
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let (mut sloppy, mut fake) = (false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => options.extend(split_options(it.next().ok_or_else(usage)?)),
            o if o.starts_with("-o") => options.extend(split_options(&o[2..])),
            "-N" | "--namespace" | "-t" | "--types" => {
                it.next();
            }
            f if f.starts_with('-') && f.len() > 1 && f[1..].chars().all(|c| "sfnvirw".contains(c)) => {
                sloppy |= f.contains('s');
                fake |= f.contains('f');
                if f.contains('r') {
                    options.push("ro".into());
                }
            }
            f if f.starts_with('-') => return Err(UsageError(format!("{HELPER}: unknown flag {f}"))),
            p => positional.push(p.to_owned()),
        }
    }
    let mut cmd = crate::cli::Cli::command();
    // The mount's own flags and the global ones (`verbose`, `config`).
    let globals: Vec<clap::Arg> = cmd.get_arguments().filter(|a| a.is_global_set()).cloned().collect();
    let mount = cmd.find_subcommand_mut("mount").expect("the mount subcommand exists");
    let mut flags: Vec<OsString> = Vec::new();
    let mut kernel = Vec::new();
    let mut env = Vec::new();
    let mut remount = false;
    for o in options {
        let (name, value) = match o.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (o.clone(), None),
        };
        if let Some(var) = name.strip_prefix("env.") {
            let value = value.ok_or_else(|| UsageError(format!("-o {o}: expected env.NAME=VALUE")))?;
            if var.is_empty() || var.contains(['=', '\0']) {
                return Err(UsageError(format!("-o {o}: bad environment variable name")));
            }
            env.push((var.to_owned(), value));
            continue;
        }
        if name == "remount" {
            remount = true;
        } else if KERNEL.contains(&o.as_str()) {
            kernel.push(o);
        } else if fstab_only(&o) {
        } else {
            let long = name.replace('_', "-");
            let arg = mount
                .get_arguments()
                .chain(&globals)
                .find(|a| a.get_long() == Some(long.as_str()) && long != "options");
            let counted = arg.is_some_and(|a| matches!(a.get_action(), clap::ArgAction::Count));
            match (arg, value) {
                // `verbose=2`: the flag twice.
                (Some(_), Some(v)) if counted && v.parse::<u8>().is_ok_and(|n| n <= 8) => {
                    flags.extend((0..v.parse::<u8>().unwrap_or(0)).map(|_| format!("--{long}").into()));
                }
                (Some(arg), Some(v)) if arg.get_action().takes_values() => flags.push(format!("--{long}={v}").into()),
                (Some(arg), None) if !arg.get_action().takes_values() => flags.push(format!("--{long}").into()),
                (Some(arg), v) if !arg.get_action().takes_values() => match v.as_deref() {
                    Some("true" | "yes" | "1" | "on") => flags.push(format!("--{long}").into()),
                    Some("false" | "no" | "0" | "off") => {}
                    _ => return Err(UsageError(format!("-o {o}: {name} is a switch: write {name} alone"))),
                },
                (Some(_), _) => return Err(UsageError(format!("-o {o}: {name} needs a value ({name}=VALUE)"))),
                (None, _) if sloppy => {}
                (None, _) => {
                    return Err(UsageError(format!(
                        "-o {o}: unknown option (see `shrinkfs mount --help`; generic ones: {})",
                        KERNEL.join(", ")
                    )));
                }
            }
        }
    }
    if fake {
        return Ok((Helper::Fake, env));
    }
    if remount {
        let dir = positional.last().ok_or_else(usage)?;
        return Ok((Helper::Remount { dir: dir.into(), options: kernel }, env));
    }
    let [source, dir] = <[String; 2]>::try_from(positional).map_err(|_| usage())?;
    let mut argv: Vec<OsString> = vec!["shrinkfs".into(), "mount".into(), source.into(), dir.into(), "--daemon".into()];
    if !kernel.is_empty() {
        argv.push(format!("--options={}", kernel.join(",")).into());
    }
    argv.extend(flags);
    Ok((Helper::Mount(argv), env))
}

/// Runs the helper: mounts (returning the command line for the caller to parse and run) or
/// remounts (and returns `None`).
pub fn run(args: &[String]) -> anyhow::Result<Option<Vec<OsString>>> {
    let (what, env) = translate(args)?;
    for (k, v) in env {
        // SAFETY: single-threaded here: the helper has started nothing yet.
        unsafe { std::env::set_var(k, v) };
    }
    match what {
        Helper::Mount(argv) => Ok(Some(argv)),
        Helper::Fake => Ok(None),
        Helper::Remount { dir, options } => {
            let dir = shrinkfs_fuse::connection::absolute(&dir)?;
            let current = shrinkfs_fuse::connection::mount_at(&dir)?
                .ok_or_else(|| UsageError(format!("{} is not mounted", dir.display())))?;
            if current.fstype != shrinkfs_fuse::connection::FS_TYPE {
                anyhow::bail!(UsageError(format!("{} is not a shrinkfs mount ({})", dir.display(), current.fstype)));
            }
            // The mount keeps the options it has unless one is named (noexec stays through
            // `remount,ro`).
            let words: Vec<String> = current.options.iter().chain(&options).cloned().collect();
            let k = crate::mount::kernel_options(&words, &current.source, false, false)?;
            shrinkfs_fuse::connection::remount(&dir, &k)
                .map_err(|e| anyhow::anyhow!(e).context(format!("cannot remount {}", dir.display())))?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    fn mount_argv(s: &str) -> Vec<String> {
        match translate(&args(s)).unwrap().0 {
            Helper::Mount(v) => v.into_iter().map(|a| a.into_string().unwrap()).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fstab_options_become_flags_in_either_spelling() {
        let v = mount_argv(
            "s3://b/p /mnt/x -o rw,noexec,_netdev,nofail,x-systemd.automount,allow_other,endpoint-url=http://h:9000,memory_limit=2G,log-file=/var/log/s.log,gpu=off,noatime",
        );
        assert_eq!(&v[..5], ["shrinkfs", "mount", "s3://b/p", "/mnt/x", "--daemon"]);
        assert!(v.contains(&"--options=rw,noexec,noatime".to_string()), "{v:?}");
        for f in [
            "--allow-other",
            "--endpoint-url=http://h:9000",
            "--memory-limit=2G",
            "--log-file=/var/log/s.log",
            "--gpu=off",
        ] {
            assert!(v.contains(&f.to_string()), "{f} missing from {v:?}");
        }
        assert!(!v.iter().any(|a| a.contains("netdev") || a.contains("nofail") || a.contains("x-systemd")));
        // The result parses as a mount command line.
        use clap::Parser;
        crate::cli::Cli::try_parse_from(&v).unwrap();
    }

    #[test]
    fn unknown_or_misused_options_are_refused_in_one_line() {
        let e = translate(&args("a /m -o colour=blue")).unwrap_err().0;
        assert!(e.contains("colour=blue") && e.contains("unknown option") && !e.contains('\n'), "{e}");
        let e = translate(&args("a /m -o memory_limit")).unwrap_err().0;
        assert!(e.contains("needs a value"), "{e}");
        let e = translate(&args("a /m -o allow_other=maybe")).unwrap_err().0;
        assert!(e.contains("switch"), "{e}");
        // Sloppy (-s): unknown options are dropped.
        assert!(matches!(translate(&args("a /m -s -o colour=blue")).unwrap().0, Helper::Mount(_)));
        assert!(translate(&args("a")).is_err());
    }

    #[test]
    fn env_remount_and_fake_are_understood() {
        let (h, env) = translate(&args("s3://b /m -o env.HOME=/root,env.AWS_PROFILE=prod,ro")).unwrap();
        assert_eq!(env, [("HOME".to_string(), "/root".to_string()), ("AWS_PROFILE".into(), "prod".into())]);
        assert!(matches!(h, Helper::Mount(_)));
        let (h, _) = translate(&args("s3://b /m -o remount,ro,user_id=0,group_id=0,default_permissions")).unwrap();
        assert_eq!(h, Helper::Remount { dir: "/m".into(), options: vec!["ro".into()] });
        assert_eq!(translate(&args("s3://b /m -f -o ro")).unwrap().0, Helper::Fake);
    }

    #[test]
    fn the_global_flags_are_options_too() {
        let v = mount_argv("a /m -o verbose=2,config=/etc/s.toml");
        assert_eq!(v.iter().filter(|a| *a == "--verbose").count(), 2, "{v:?}");
        assert!(v.contains(&"--config=/etc/s.toml".to_string()), "{v:?}");
        assert_eq!(mount_argv("a /m -o verbose").iter().filter(|a| *a == "--verbose").count(), 1);
        assert!(!mount_argv("a /m -o verbose=0").contains(&"--verbose".to_string()));
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(&v).unwrap();
        assert_eq!(cli.verbose, 2);
        assert!(translate(&args("a /m -o verbose=lots")).is_err());
    }

    #[test]
    fn escaped_commas_stay_in_values() {
        assert_eq!(split_options("a=1\\,2,b"), ["a=1,2", "b"]);
        assert_eq!(split_options("log-file=\"/x/a,b.log\",ro"), ["log-file=/x/a,b.log", "ro"]);
    }
}
