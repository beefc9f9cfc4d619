//! Settings from outside the command line: a TOML config file and `SHRINKFS_<FLAG>` environment
//! variables, layered under it (command line > environment > config file > built-in default).
//!
//! Every long flag of the subcommand being run can be set both ways. Each value is checked with
//! the flag's own parser first, so a bad one is reported naming its file and key or its variable,
//! then becomes the flag's default in clap's `Command`; clap parses the command line as usual, so
//! a flag given there wins and an absent one takes the layered value.
//!
//! The file is `--config FILE`, else `$SHRINKFS_CONFIG` (empty: none), else
//! /etc/shrinkfs/config.toml when it exists. Its keys are long flag names (`-` or `_`): top-level
//! keys are global flags (`verbose`), and a table per subcommand (`[mount]`, `[pack]`,
//! `[bench.fs]`) holds that subcommand's flags. Unknown keys and sections are errors. `SHRINKFS_*`
//! variables that name no flag of the subcommand are left alone: the GPU's settings (`gpuenv`)
//! and the tests read some of their own ([`NOT_FLAGS`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command, CommandFactory, FromArgMatches};

use crate::cli::Cli;

/// The config file read when neither `--config` nor `SHRINKFS_CONFIG` names one (if it exists).
pub const DEFAULT_CONFIG: &str = "/etc/shrinkfs/config.toml";
/// The variable naming the config file (empty: read none).
pub const CONFIG_VAR: &str = "SHRINKFS_CONFIG";
/// `SHRINKFS_*` names that are not flags: the config file's, the systemd unit template's
/// (`SHRINKFS_SOURCE`, `SHRINKFS_ARGS`), the GPU's (`gpuenv`), and test knobs.
/// No flag may be named so that its variable is one of these (a test checks).
pub const NOT_FLAGS: &[&str] = &[
    CONFIG_VAR,
    "SHRINKFS_SOURCE",
    "SHRINKFS_ARGS",
    "SHRINKFS_NVCOMP_LIB",
    "SHRINKFS_GPU_LANES",
    "SHRINKFS_GPU_PART_MIB",
    "SHRINKFS_GPU_BATCH_COPY",
    "SHRINKFS_GPU_STREAMING_COPY",
    "SHRINKFS_GPU_FAULT",
    "SHRINKFS_GPU_FRAME_BUFFERS",
    "SHRINKFS_GPU_FRAME_BUFFERS_AT_START",
    "SHRINKFS_VECTORS_OUT",
    "SHRINKFS_MODEL_CASES",
    "SHRINKFS_MODEL_TRACE",
    "SHRINKFS_PYTHON",
    "SHRINKFS_BIN",
];

/// A bad config file, key, value or variable, in one line naming where it came from.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(String);

/// Whether `args` give flag `--long` (which then wins over the environment).
fn on_command_line(args: &[OsString], long: &str) -> bool {
    let flag = format!("--{long}");
    args.iter()
        .filter_map(|a| a.to_str())
        .any(|a| a == flag || a.strip_prefix(&flag).is_some_and(|r| r.starts_with('=')))
}

/// Flags whose absence stores data unencrypted: an empty variable for one is an error, not unset.
const PROTECTING: [&str; 4] = ["key-file", "sse", "sse-kms-key-id", "sse-c-key-file"];

/// The environment variable that sets the flag `--long`: `memory-limit` -> `SHRINKFS_MEMORY_LIMIT`.
pub fn env_name(long: &str) -> String {
    format!("SHRINKFS_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// How a flag takes its value, for the flags that can be set from outside the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A switch; `on` is the value stored when it is given (`false` for `ArgAction::SetFalse`).
    Switch { on: bool },
    /// A counted flag (`-vv`).
    Count,
    /// One value.
    One,
    /// Any number of values (repeatable, or a list).
    Many,
}

/// Whether the flag can be set from the file and the environment, and how: every flag with a
/// long name, except `--config` itself (and help and version).
fn kind(arg: &Arg) -> Option<Kind> {
    if arg.is_positional() || arg.get_long().is_none() || arg.get_id() == "config" {
        return None;
    }
    match arg.get_action() {
        ArgAction::SetTrue => Some(Kind::Switch { on: true }),
        ArgAction::SetFalse => Some(Kind::Switch { on: false }),
        ArgAction::Count => Some(Kind::Count),
        ArgAction::Set => Some(Kind::One),
        ArgAction::Append => Some(Kind::Many),
        _ => None,
    }
}

/// Whether the flag can be set from the config file and the environment (see [`env_name`]).
pub fn settable(arg: &Arg) -> bool {
    kind(arg).is_some()
}

/// The command line's command, its help saying how flags are also set from the file and the
/// environment.
pub fn command() -> Command {
    let root = Cli::command().after_long_help(
        "Every flag can also be set in a config file (--config FILE, else $SHRINKFS_CONFIG, else \
         /etc/shrinkfs/config.toml when it exists), in the section of its subcommand ([mount], [pack], \
         [bench.fs], ...; global flags at the top) with its long name as the key (memory-limit = \"2G\"), \
         or in the environment as SHRINKFS_<FLAG> (SHRINKFS_MEMORY_LIMIT=2G). The command line wins over \
         the environment, which wins over the file.",
    );
    annotate(root, &[])
}

/// Adds the settings note to every subcommand under `cmd` that has flags.
fn annotate(mut cmd: Command, path: &[String]) -> Command {
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    for name in names {
        let sub_path: Vec<String> = path.iter().cloned().chain([name.clone()]).collect();
        cmd = cmd.mut_subcommand(&name, |mut sub| {
            let example = sub.get_arguments().find(|a| settable(a)).and_then(Arg::get_long).map(str::to_owned);
            if let Some(long) = example {
                let note = format!(
                    "Every flag can also be set in the [{}] section of the config file (key: the long name, as \
                     {long} = ...) or in the environment as SHRINKFS_<FLAG> ({}=...); the command line wins \
                     over the environment, which wins over the file. See shrinkfs(1).",
                    sub_path.join("."),
                    env_name(&long),
                );
                sub = sub.after_long_help(note);
            }
            annotate(sub, &sub_path)
        });
    }
    cmd
}

/// Parses the command line with the config file and the process's environment layered under it.
/// A bad setting is a clap error of kind `ValueValidation` (exit code 2) whose message names it.
pub fn parse_from(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let cmd = match layered(&args, &|name| std::env::var_os(name), Path::new(DEFAULT_CONFIG)) {
        Ok(cmd) => cmd,
        // A broken file or variable must not hide the help that says how to mend it.
        Err(_) if asks_for_help(&args) => command(),
        Err(e) => return Err(clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n"))),
    };
    let mut matches = cmd.try_get_matches_from(args)?;
    Cli::from_arg_matches_mut(&mut matches)
}

/// Whether `args` ask for help or the version (which then never fail for a bad setting).
fn asks_for_help(args: &[OsString]) -> bool {
    args.iter().skip(1).take_while(|a| *a != "--").any(|a| ["-h", "--help", "-V", "--version"].iter().any(|h| a == h))
}

/// The command with every flag of the subcommand in `args` that the file or the environment sets
/// given that value as its default. `env` reads a variable; `default_config` is the file read
/// when none is named.
fn layered(
    args: &[OsString],
    env: &dyn Fn(&str) -> Option<OsString>,
    default_config: &Path,
) -> Result<Command, SettingsError> {
    let cmd = command();
    let path = subcommand_path(&cmd, args);
    // Flag id -> its values, the deeper or later layer replacing the earlier.
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some((file, table)) = read_config(args, env, default_config)? {
        let sections = check_file(&cmd, &file, &table)?;
        for depth in 0..=path.len() {
            if let Some(set) = sections.get(&path[..depth]) {
                values.extend(set.iter().map(|(id, v)| (id.clone(), v.clone())));
            }
        }
    }
    let leaf = find(&cmd, &path);
    for (arg, kind) in globals(&cmd).chain(leaf.get_arguments().filter_map(|a| Some((a, kind(a)?)))) {
        let long = arg.get_long().unwrap_or_default();
        let name = env_name(long);
        let Some(raw) = env(&name) else { continue };
        if raw.is_empty() {
            // An empty variable is unset, except where that would quietly store data with less
            // protection than asked for (`SHRINKFS_KEY_FILE=$KEY` with `KEY` unset).
            if PROTECTING.contains(&long) && !on_command_line(args, long) {
                let m = format!("environment variable {name} is set but empty: give it a value, or unset it");
                return Err(SettingsError(m));
            }
            continue;
        }
        let raw =
            raw.into_string().map_err(|_| SettingsError(format!("environment variable {name}: not valid UTF-8")))?;
        let checked =
            check(arg, kind, vec![raw]).map_err(|m| SettingsError(format!("environment variable {name}: {m}")))?;
        values.insert(arg.get_id().to_string(), checked);
    }
    Ok(apply(cmd, &path, values))
}

/// Makes each layered value the default of its flag (global flags on the top command, which
/// hands them down to the subcommands).
fn apply(mut cmd: Command, path: &[String], values: BTreeMap<String, Vec<String>>) -> Command {
    let global_ids: Vec<String> = globals(&cmd).map(|(a, _)| a.get_id().to_string()).collect();
    let (global, own): (Vec<_>, Vec<_>) = values.into_iter().partition(|(id, _)| global_ids.contains(id));
    let with_default = |vals: Vec<String>| move |a: Arg| a.required(false).default_values(vals);
    for (id, vals) in global {
        cmd = cmd.mut_arg(id, with_default(vals));
    }
    mut_at(cmd, path, move |mut leaf| {
        for (id, vals) in own {
            leaf = leaf.mut_arg(id, with_default(vals));
        }
        leaf
    })
}

/// Changes the subcommand at `path` with `f`.
fn mut_at(cmd: Command, path: &[String], f: impl FnOnce(Command) -> Command) -> Command {
    match path.split_first() {
        None => f(cmd),
        Some((first, rest)) => cmd.mut_subcommand(first, |sub| mut_at(sub, rest, f)),
    }
}

/// The subcommand at `path` (the path came from the command's own subcommands).
fn find<'a>(cmd: &'a Command, path: &[String]) -> &'a Command {
    path.iter().fold(cmd, |c, name| c.find_subcommand(name).unwrap_or(c))
}

/// The settable global flags (`--verbose`), which every subcommand takes.
fn globals(cmd: &Command) -> impl Iterator<Item = (&Arg, Kind)> {
    cmd.get_arguments().filter(|a| a.is_global_set()).filter_map(|a| Some((a, kind(a)?)))
}

/// The subcommand names in `args` (`["bench", "fs"]`), found as clap will find them: the first
/// word that is not a flag or a flag's value, at each level.
fn subcommand_path(cmd: &Command, args: &[OsString]) -> Vec<String> {
    let mut path = Vec::new();
    let mut cur = cmd;
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        let Some(w) = word.to_str() else { break };
        if w == "--" {
            break;
        }
        if let Some(long) = w.strip_prefix("--") {
            let takes_value = cur
                .get_arguments()
                .chain(cmd.get_arguments().filter(|a| a.is_global_set()))
                .any(|a| a.get_long() == Some(long) && a.get_action().takes_values());
            if takes_value {
                words.next();
            }
            continue;
        }
        if w.starts_with('-') {
            continue;
        }
        match cur.find_subcommand(w) {
            Some(sub) => {
                path.push(sub.get_name().to_owned());
                cur = sub;
                if !cur.has_subcommands() {
                    break;
                }
            }
            None => break,
        }
    }
    path
}

/// The config file named by `--config` (the last one before `--`), else by `SHRINKFS_CONFIG`,
/// else `default` if it exists, read and parsed; `None` when there is none.
fn read_config(
    args: &[OsString],
    env: &dyn Fn(&str) -> Option<OsString>,
    default: &Path,
) -> Result<Option<(PathBuf, toml::Table)>, SettingsError> {
    let mut named: Option<OsString> = None;
    let mut words = args.iter().skip(1);
    while let Some(w) = words.next() {
        match w.to_str() {
            Some("--") => break,
            Some("--config") => named = words.next().cloned(),
            Some(s) if s.starts_with("--config=") => named = Some(s["--config=".len()..].into()),
            _ => {}
        }
    }
    let named = named.or_else(|| env(CONFIG_VAR));
    let path = match &named {
        Some(p) if p.is_empty() => return Ok(None),
        Some(p) => PathBuf::from(p),
        None => default.to_path_buf(),
    };
    let text = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if named.is_none() && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            let hint = if named.is_none() { format!(" (set {CONFIG_VAR}= to read none)") } else { String::new() };
            return Err(SettingsError(format!("cannot read config file {}: {e}{hint}", path.display())));
        }
    };
    let text = String::from_utf8(text)
        .map_err(|_| SettingsError(format!("config file {}: not valid UTF-8", path.display())))?;
    let table = text.parse::<toml::Table>().map_err(|e| {
        let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let at = line.map(|l| format!(" line {l}")).unwrap_or_default();
        let message = e.message().trim().replace('\n', "; ");
        SettingsError(format!("config file {}{at}: {message}", path.display()))
    })?;
    Ok(Some((path, table)))
}

/// Checked values of the file: section path (`["bench", "fs"]`) -> (flag id, its values).
type Sections = BTreeMap<Vec<String>, Vec<(String, Vec<String>)>>;

/// Every section of the file checked against the command: each key a flag of its subcommand (or
/// a global one), each value accepted by the flag's parser. Returns the values by section path.
fn check_file(cmd: &Command, file: &Path, table: &toml::Table) -> Result<Sections, SettingsError> {
    let mut out = BTreeMap::new();
    check_section(cmd, cmd, &[], file, table, &mut out)?;
    Ok(out)
}

fn check_section(
    root: &Command,
    cur: &Command,
    path: &[String],
    file: &Path,
    table: &toml::Table,
    out: &mut Sections,
) -> Result<(), SettingsError> {
    let section = if path.is_empty() { String::new() } else { format!("[{}] ", path.join(".")) };
    let at = |key: &str| format!("config file {}: {section}{key}", file.display());
    let mut set: Vec<(String, Vec<String>)> = Vec::new();
    for (key, value) in table {
        let name = key.replace('_', "-");
        if let toml::Value::Table(sub_table) = value {
            let Some(sub) = cur.find_subcommand(&name) else {
                let known: Vec<&str> = cur.get_subcommands().map(|s| s.get_name()).collect();
                let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                let full: Vec<&str> = path.iter().map(String::as_str).chain([key.as_str()]).collect();
                return Err(SettingsError(format!(
                    "config file {}: [{}]: unknown section (a section is a subcommand; here: {known})",
                    file.display(),
                    full.join(".")
                )));
            };
            let sub_path: Vec<String> = path.iter().cloned().chain([sub.get_name().to_owned()]).collect();
            check_section(root, sub, &sub_path, file, sub_table, out)?;
            continue;
        }
        let flag = cur
            .get_arguments()
            .chain(root.get_arguments().filter(|a| a.is_global_set()))
            .find(|a| a.get_long() == Some(name.as_str()))
            .and_then(|a| Some((a, kind(a)?)));
        let Some((arg, kind)) = flag else {
            let command = std::iter::once("shrinkfs").chain(path.iter().map(String::as_str)).collect::<Vec<_>>();
            let why = if name == "config" {
                "the config file cannot name another".to_owned()
            } else {
                format!("unknown key: not a flag of `{}`", command.join(" "))
            };
            return Err(SettingsError(format!("{}: {why}", at(key))));
        };
        let id = arg.get_id().to_string();
        if set.iter().any(|(i, _)| *i == id) {
            return Err(SettingsError(format!("{}: set twice (`-` and `_` spellings are the same key)", at(key))));
        }
        let raw = toml_values(value).map_err(|m| SettingsError(format!("{}: {m}", at(key))))?;
        let checked = check(arg, kind, raw).map_err(|m| SettingsError(format!("{}: {m}", at(key))))?;
        set.push((id, checked));
    }
    out.insert(path.to_vec(), set);
    Ok(())
}

/// A config value as the strings a command line would give: a scalar is one, an array many.
fn toml_values(value: &toml::Value) -> Result<Vec<String>, String> {
    let scalar = |v: &toml::Value| match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Datetime(_) => Err("a date is no flag's value".to_owned()),
        toml::Value::Array(_) | toml::Value::Table(_) => Err("expected a string, number or boolean".to_owned()),
    };
    match value {
        toml::Value::Array(items) => items.iter().map(scalar).collect(),
        v => Ok(vec![scalar(v)?]),
    }
}

/// Checks values for `arg` and returns them as its default values (a switch's as `true`/`false`).
fn check(arg: &Arg, kind: Kind, raw: Vec<String>) -> Result<Vec<String>, String> {
    let one = |raw: Vec<String>| -> Result<String, String> {
        let n = raw.len();
        <[String; 1]>::try_from(raw).map(|[v]| v).map_err(|_| format!("takes one value, not {n}"))
    };
    match kind {
        Kind::Switch { on } => {
            let v = one(raw)?;
            let given = parse_bool(&v).ok_or_else(|| format!("'{v}' is not a switch value (true or false)"))?;
            Ok(vec![(given == on).to_string()])
        }
        Kind::Count => {
            let v = one(raw)?;
            let n: u8 = v.trim().parse().map_err(|_| format!("'{v}' is not a count from 0 to 255"))?;
            Ok(vec![n.to_string()])
        }
        Kind::One => {
            let v = one(raw)?;
            probe(arg, std::slice::from_ref(&v))?;
            Ok(vec![v])
        }
        Kind::Many => {
            probe(arg, &raw)?;
            Ok(raw)
        }
    }
}

/// A switch's value: true/false, yes/no, on/off, 1/0 (any case).
fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// Runs the flag's own parser on the values, through clap as the command line would (lists split
/// at the flag's delimiter), on a command holding only a copy of that flag.
fn probe(arg: &Arg, values: &[String]) -> Result<(), String> {
    let long = arg.get_long().unwrap_or_default().to_owned();
    let mut copy = Arg::new(arg.get_id().clone())
        .long(long.clone())
        .action(arg.get_action().clone())
        .value_parser(arg.get_value_parser().clone())
        .allow_hyphen_values(true)
        .ignore_case(arg.is_ignore_case_set());
    if let Some(n) = arg.get_num_args() {
        copy = copy.num_args(n);
    }
    if let Some(d) = arg.get_value_delimiter() {
        copy = copy.value_delimiter(d);
    }
    if let Some(names) = arg.get_value_names() {
        copy = copy.value_names(names.to_vec());
    }
    let cmd = Command::new("shrinkfs").no_binary_name(true).disable_help_flag(true).arg(copy);
    cmd.try_get_matches_from(values.iter().map(|v| format!("--{long}={v}")))
        .map(drop)
        .map_err(|e| crate::exit::clap_message(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    use crate::cli::Command as Sub;

    /// Parses `line` with `vars` as the environment and `file` (if any) as the default config file.
    fn parse(line: &str, vars: &[(&str, &str)], file: Option<&str>) -> Result<Cli, String> {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        if let Some(text) = file {
            std::fs::write(&config, text).unwrap();
        }
        let vars: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), v.into())).collect();
        let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
        let cmd = layered(&args, &|n| vars.get(n).cloned(), &config).map_err(|e| e.to_string())?;
        let mut m = cmd.try_get_matches_from(&args).map_err(|e| crate::exit::clap_message(&e))?;
        Cli::from_arg_matches_mut(&mut m).map_err(|e| e.to_string())
    }

    fn mount(cli: Cli) -> crate::cli::MountArgs {
        match cli.command {
            Sub::Mount(m) => *m,
            other => panic!("not a mount: {other:?}"),
        }
    }

    const FILE: &str = r#"
verbose = 1
[mount]
memory-limit = "1G"
level = 5
threads = 8
allow_other = true
options = ["noexec", "noatime"]
metadata-ttl = 2.5
[pack]
codec = "lz4"
"#;

    #[test]
    fn command_line_beats_environment_beats_file_beats_default() {
        let env = [("SHRINKFS_MEMORY_LIMIT", "2G"), ("SHRINKFS_LEVEL", "7"), ("SHRINKFS_READ_ONLY", "yes")];
        let cli = parse("shrinkfs mount memory:// /m --level 9 -o ro", &env, Some(FILE)).unwrap();
        assert_eq!(cli.verbose, 1, "top-level key of the file");
        let m = mount(cli);
        assert_eq!(m.codec.level, 9, "command line over environment and file");
        assert_eq!(m.memory_limit, Some(2 << 30), "environment over file");
        assert_eq!(m.threads, 8, "file over default");
        assert_eq!(m.cache_size, 10 << 30, "default");
        assert!(m.allow_other && m.read_only, "switches from the file and the environment");
        assert_eq!(m.options, ["ro"], "a list on the command line replaces the file's");
        assert_eq!(m.metadata_ttl, Duration::from_millis(2500));
        assert_eq!(m.negative_metadata_ttl, None, "unset: the metadata TTL's");
        assert_eq!(m.codec.codec, shrinkfs_codec::CodecId::Zstd, "[pack] does not reach mount");

        let vars = [("SHRINKFS_NEGATIVE_METADATA_TTL", "indefinite")];
        let m = mount(parse("shrinkfs mount memory:// /m --metadata-ttl indefinite", &vars, None).unwrap());
        assert_eq!((m.metadata_ttl, m.negative_metadata_ttl), (Duration::MAX, Some(Duration::MAX)));
        let m = mount(parse("shrinkfs mount memory:// /m", &[], Some(FILE)).unwrap());
        assert_eq!((m.codec.level, m.memory_limit, m.options.len()), (5, Some(1 << 30), 2));
        // A switch the file turns on, the environment turns off.
        let m = mount(parse("shrinkfs mount memory:// /m", &[("SHRINKFS_ALLOW_OTHER", "false")], Some(FILE)).unwrap());
        assert!(!m.allow_other);
        // Without a file or variables, the built-in defaults.
        let m = mount(parse("shrinkfs mount memory:// /m", &[], None).unwrap());
        assert_eq!((m.codec.level, m.memory_limit, m.threads, m.allow_other), (1, None, 16, false));
    }

    #[test]
    fn global_flags_follow_the_same_order_wherever_given() {
        let v = |line: &str, env: &[(&str, &str)]| parse(line, env, Some(FILE)).unwrap().verbose;
        assert_eq!(v("shrinkfs mount memory:// /m", &[]), 1);
        assert_eq!(v("shrinkfs mount memory:// /m", &[("SHRINKFS_VERBOSE", "3")]), 3);
        assert_eq!(v("shrinkfs -vv mount memory:// /m", &[("SHRINKFS_VERBOSE", "3")]), 2);
        assert_eq!(v("shrinkfs mount memory:// /m -v", &[("SHRINKFS_VERBOSE", "3")]), 1);
        let section = "verbose = 1\n[pack]\nverbose = 2\n";
        assert_eq!(parse("shrinkfs pack a b", &[], Some(section)).unwrap().verbose, 2, "a section's beats the top");
    }

    #[test]
    fn the_file_is_chosen_by_flag_then_variable_then_default() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("other.toml");
        std::fs::write(&other, "[mount]\nlevel = 3\n").unwrap();
        let o = other.to_str().unwrap();
        let level = |line: &str, env: &[(&str, &str)]| parse(line, env, Some(FILE)).map(|c| mount(c).codec.level);
        assert_eq!(level(&format!("shrinkfs mount --config {o} memory:// /m"), &[]), Ok(3));
        assert_eq!(level(&format!("shrinkfs --config={o} mount memory:// /m"), &[]), Ok(3));
        assert_eq!(level("shrinkfs mount memory:// /m", &[("SHRINKFS_CONFIG", o)]), Ok(3));
        assert_eq!(level("shrinkfs mount memory:// /m", &[("SHRINKFS_CONFIG", "")]), Ok(1), "empty: no file");
        assert_eq!(level("shrinkfs mount --config= memory:// /m", &[]), Ok(1), "an empty --config: no file");
        assert_eq!(level("shrinkfs --config= mount memory:// /m", &[("SHRINKFS_CONFIG", o)]), Ok(1));
        assert_eq!(level("shrinkfs mount memory:// /m", &[]), Ok(5), "the default file");
        let e = level("shrinkfs mount memory:// /m --config /nonexistent/c.toml", &[]).unwrap_err();
        assert!(e.contains("cannot read config file /nonexistent/c.toml") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn unknown_keys_and_sections_are_one_line_errors_naming_file_and_key() {
        for (text, want) in [
            ("[mount]\ncolour = \"blue\"\n", "[mount] colour: unknown key: not a flag of `shrinkfs mount`"),
            ("colour = 1\n", "colour: unknown key: not a flag of `shrinkfs`"),
            ("[mnt]\nlevel = 1\n", "[mnt]: unknown section"),
            ("[bench.fss]\nfiles = 1\n", "[bench.fss]: unknown section (a section is a subcommand; here: codecs, fs)"),
            ("[mount]\nsource = \"/srv\"\n", "[mount] source: unknown key"),
            ("[mount]\nconfig = \"/x\"\n", "[mount] config: the config file cannot name another"),
            ("[mount]\nmemory-limit = \"1G\"\nmemory_limit = \"2G\"\n", "memory_limit: set twice"),
            ("[mount\nlevel = 1\n", "line 1: "),
        ] {
            // Even when another subcommand runs: the file is checked whole.
            let e = parse("shrinkfs pack a b", &[], Some(text)).unwrap_err();
            assert!(e.contains("config file /") && e.contains(want) && !e.contains('\n'), "{text:?}: {e}");
        }
    }

    #[test]
    fn bad_values_are_one_line_errors_naming_their_source() {
        for (text, want) in [
            ("[mount]\nlevel = 40\n", "[mount] level: invalid value '40' for '--level <LEVEL>'"),
            ("[mount]\nmemory-limit = \"lots\"\n", "[mount] memory-limit: invalid value 'lots'"),
            ("[mount]\nallow-other = \"maybe\"\n", "[mount] allow-other: 'maybe' is not a switch value"),
            ("[mount]\ncodec = \"brotli\"\n", "invalid value 'brotli' for '--codec <CODEC>'"),
            ("[mount]\nlevel = [1, 2]\n", "[mount] level: takes one value, not 2"),
            ("[mount]\nlevel = {a = 1}\n", "[mount.level]: unknown section"),
            ("[mount]\noptions = [[\"ro\"]]\n", "expected a string, number or boolean"),
            ("verbose = 300\n", "verbose: '300' is not a count"),
        ] {
            let e = parse("shrinkfs mount memory:// /m", &[], Some(text)).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{text:?}: {e}");
        }
        for (var, value, want) in [
            ("SHRINKFS_LEVEL", "abc", "environment variable SHRINKFS_LEVEL: invalid value 'abc' for '--level <LEVEL>'"),
            ("SHRINKFS_ALLOW_OTHER", "2", "environment variable SHRINKFS_ALLOW_OTHER: '2' is not a switch value"),
            ("SHRINKFS_METADATA_TTL", "-1", "SHRINKFS_METADATA_TTL: invalid value '-1'"),
            ("SHRINKFS_OPTIONS", "ro,bogus", "SHRINKFS_OPTIONS"),
            ("SHRINKFS_KEY_FILE", "", "environment variable SHRINKFS_KEY_FILE is set but empty"),
            ("SHRINKFS_SSE_C_KEY_FILE", "", "environment variable SHRINKFS_SSE_C_KEY_FILE is set but empty"),
        ] {
            let r = parse("shrinkfs mount memory:// /m", &[(var, value)], None);
            match r {
                Err(e) => assert!(e.contains(want) && !e.contains('\n'), "{var}={value}: {e}"),
                // -o words are checked when mounting, not by the parser.
                Ok(_) => assert_eq!(var, "SHRINKFS_OPTIONS"),
            }
        }
        // The command line wins over an empty variable too.
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, [7u8; 32]).unwrap();
        let line = format!("shrinkfs mount memory:// /m --key-file={}", key.display());
        assert!(parse(&line, &[("SHRINKFS_KEY_FILE", "")], None).is_ok());
    }

    #[test]
    fn variables_that_name_no_flag_of_the_subcommand_are_left_alone() {
        let env =
            [("SHRINKFS_GPU_LANES", "many"), ("SHRINKFS_ARGS", "--x"), ("SHRINKFS_JSON", "x"), ("SHRINKFS_LEVEL", "")];
        // SHRINKFS_JSON belongs to inspect and the benches; an empty variable is unset.
        let m = mount(parse("shrinkfs mount memory:// /m", &env, None).unwrap());
        assert_eq!(m.codec.level, 1);
        // Variables apply to the subcommand being run only: a bad SHRINKFS_DATA (bench fs) does
        // not stop a mount.
        assert!(parse("shrinkfs mount memory:// /m", &[("SHRINKFS_DATA", "nope")], None).is_ok());
        assert!(parse("shrinkfs bench fs --target /t", &[("SHRINKFS_DATA", "nope")], None).is_err());
    }

    #[test]
    fn help_and_version_work_with_a_broken_file() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[mount]\ncolour = 1\n").unwrap();
        let b = bad.to_str().unwrap();
        let run = |line: String| parse_from(line.split(' ').map(OsString::from).collect()).unwrap_err();
        assert_eq!(run(format!("shrinkfs --config {b} mount --help")).kind(), clap::error::ErrorKind::DisplayHelp);
        assert_eq!(run(format!("shrinkfs --config {b} --version")).kind(), clap::error::ErrorKind::DisplayVersion);
        let e = run(format!("shrinkfs --config {b} mount a b"));
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(crate::exit::clap_message(&e).starts_with("config file /"), "{e}");
    }

    #[test]
    fn a_required_flag_can_come_from_the_file_and_lists_take_arrays() {
        let text = "[bench.fs]\ntarget = [\"a=/tmp/a\", \"b=/tmp/b\"]\nworkloads = \"seq-write,ls\"\n";
        let cli = parse("shrinkfs bench fs", &[], Some(text)).unwrap();
        let Sub::Bench(crate::cli::BenchCommand::Fs(a)) = cli.command else { panic!() };
        assert_eq!(a.target.len(), 2);
        assert_eq!(a.workloads.len(), 2);
    }

    /// Every subcommand path with its command.
    fn all_paths(cmd: &Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(path.clone());
        for sub in cmd.get_subcommands() {
            all_paths(sub, path.iter().cloned().chain([sub.get_name().to_owned()]).collect(), out);
        }
    }

    /// A value the flag accepts, different from its default where the flag allows.
    fn sample(arg: &Arg, kind: Kind) -> String {
        if let Kind::Switch { .. } = kind {
            return "true".into();
        }
        if kind == Kind::Count {
            return "2".into();
        }
        let possible: Vec<String> = arg.get_possible_values().iter().map(|p| p.get_name().to_owned()).collect();
        let mut candidates = possible.into_iter().rev().chain(
            [
                "2",
                "0.5",
                "/tmp/shrinkfs-sample",
                concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
                "127.0.0.1:9464",
                "http://127.0.0.1:9000",
                "x=/tmp",
                "x=2",
                "1M:64K",
                "64M",
                "-5",
            ]
            .map(String::from),
        );
        candidates
            .find(|c| check(arg, kind, vec![c.clone()]).is_ok())
            .unwrap_or_else(|| panic!("no sample value for --{}: add one that it accepts", arg.get_long().unwrap()))
    }

    #[test]
    fn every_flag_of_every_subcommand_is_settable_from_the_file_and_the_environment() {
        let root = command();
        let mut paths = Vec::new();
        all_paths(&root, Vec::new(), &mut paths);
        let mut count = 0;
        for path in paths {
            let leaf = find(&root, &path);
            for (arg, kind) in leaf.get_arguments().filter_map(|a| Some((a, kind(a)?))) {
                let long = arg.get_long().unwrap();
                let value = sample(arg, kind);
                let want = check(arg, kind, vec![value.clone()]).unwrap();
                let args: Vec<OsString> =
                    std::iter::once("shrinkfs").chain(path.iter().map(String::as_str)).map(OsString::from).collect();
                let var = env_name(long);
                assert!(!NOT_FLAGS.contains(&var.as_str()), "--{long}'s variable {var} is reserved");
                let section = if path.is_empty() { String::new() } else { format!("[{}]\n", path.join(".")) };
                let file = format!("{section}{} = {}\n", long.replace('-', "_"), toml::Value::String(value.clone()));
                let dir = tempfile::tempdir().unwrap();
                std::fs::write(dir.path().join("c.toml"), &file).unwrap();
                let from_env = layered(&args, &|n| (n == var).then(|| value.clone().into()), Path::new("/nonexistent"));
                let from_file = layered(&args, &|_| None, &dir.path().join("c.toml"));
                for (how, cmd) in [("environment", from_env), ("file", from_file)] {
                    let mut cmd = cmd.unwrap_or_else(|e| panic!("--{long} from the {how}: {e}"));
                    // clap's own checks of the command (defaults its parser accepts, ...).
                    cmd.build();
                    let got: Vec<String> = find(&cmd, &path)
                        .get_arguments()
                        .find(|a| a.get_id() == arg.get_id())
                        .unwrap()
                        .get_default_values()
                        .iter()
                        .map(|v| v.to_string_lossy().into_owned())
                        .collect();
                    assert_eq!(got, want, "--{long} of {path:?} from the {how}");
                }
                count += 1;
            }
        }
        assert!(count > 60, "only {count} flags found");
    }

    #[test]
    fn the_example_config_sets_only_real_flags_when_uncommented() {
        let text = include_str!("../packaging/config.toml");
        // Settings are commented out as `#key = value`, prose as `# text`.
        let uncommented: String = text
            .lines()
            .map(|l| l.strip_prefix('#').filter(|r| r.starts_with(|c: char| c.is_ascii_lowercase())).unwrap_or(l))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(uncommented.matches(" = ").count() >= 20, "{uncommented}");
        uncommented.parse::<toml::Table>().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, &uncommented).unwrap();
        let args: Vec<OsString> = ["shrinkfs", "mount"].map(OsString::from).to_vec();
        layered(&args, &|_| None, &path).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
        // The file as shipped sets nothing.
        let shipped = check_file(&command(), &path, &text.parse::<toml::Table>().unwrap()).unwrap();
        assert!(shipped.values().all(Vec::is_empty), "{shipped:?}");
    }
}
